// Variants of the bf16 d = 128 non-causal attention kernel for tools/attn_study (see
// study_bf16_d128.cu). Host-only header.
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "kernels/attention/launch.hpp"
#include "kernels/attention/params.hpp"

namespace xstage::kernels::attention {

struct StudyVariant {
  const char* name;
  KernelInfo info;
  cudaError_t (*launch)(AttentionParams const&, cudaStream_t);
};

std::vector<StudyVariant> attention_study_variants();

}  // namespace xstage::kernels::attention
