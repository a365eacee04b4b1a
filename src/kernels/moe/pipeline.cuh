// The MoE GEMMs' pipeline plumbing: the TMA -> shared-memory ring and its bounded waits are
// shared with attention (kernels/common/pipeline.cuh); what is MoE's own here is the 4-byte
// cp.async path by which scale copies join a stage.
#pragma once
#include <cstdint>

#include <cute/arch/util.hpp>
#include <cutlass/arch/barrier.h>

#include "kernels/common/pipeline.cuh"

namespace xstage::kernels::moe {

using dev::bounded_poll;
using dev::bounded_wait;
using dev::PipeState;
using dev::TmaPipeline;

// 4-byte cp.async with zero fill (src_bytes 0: nothing read) and its mbarrier arrival: how the
// scale copies (W8A8 scale warp, W4A8 register-operand token scales) join a stage.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Arrives on the barrier once this thread's cp.asyncs so far have landed; the arrival is
// counted in the barrier's expected count (.noinc).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(cute::cast_smem_ptr_to_uint(bar))
               : "memory");
}

// The CUTLASS mbarrier wrappers carry no "memory" clobber: ordinary shared-memory accesses
// around them are pinned with a compiler barrier (the hardware ordering is the arrive's release
// and the wait's acquire).
__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }
__device__ __forceinline__ void wait_then_read(uint64_t const* bar, uint32_t phase) {
  bounded_wait(bar, phase);
  compiler_fence();
}
__device__ __forceinline__ void write_then_arrive(uint64_t* bar) {
  compiler_fence();
  cutlass::arch::ClusterBarrier::arrive(bar);
}

}  // namespace xstage::kernels::moe
