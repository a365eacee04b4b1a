// Shared pieces of the nanobind extension xstage._C (python/xstage, docs/python.md).
#pragma once
#include <nanobind/nanobind.h>

namespace xstage::python {

void bind_model(nanobind::module_& m);
void bind_attention(nanobind::module_& m);  // empty (has_attention = False) without the kernels
void bind_moe(nanobind::module_& m);        // prepackers always; the GEMM only with the kernels
void bind_team(nanobind::module_& m);       // Team from an NCCL unique id, where team.hpp has it

}  // namespace xstage::python
