// The 16-byte store flavours the probe compares, and the fences around them.
// All take a generic pointer that may point into a peer GPU's memory (NVLink).
#pragma once
#include <cstdint>

namespace xstage::dev {

// Plain weak 16-byte store (st.global.v4.b32): what a kernel epilogue normally issues.
__device__ __forceinline__ void st_v4(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// 16-byte store that does not allocate in L1.
__device__ __forceinline__ void st_v4_noalloc(void* p, uint4 v) {
  asm volatile("st.global.L1::no_allocate.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// 16-byte store with release semantics at system scope: each store orders everything the
// thread wrote before it (the costliest flavour; no vector form of st.release exists, so
// it is a release fence followed by a relaxed vector store).
__device__ __forceinline__ void st_v4_release(void* p, uint4 v) {
  asm volatile("fence.acq_rel.sys;\n\tst.relaxed.sys.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Bulk copy shared -> global (the TMA engine), completion tracked by a bulk group.
__device__ __forceinline__ void bulk_s2g(void* gdst, const void* ssrc, uint32_t bytes) {
  uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(ssrc));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst), "r"(s), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until the source shared memory of all committed groups has been read.
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Waits until all committed bulk copies are complete (writes performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
// Orders async-proxy (TMA) writes to global memory, completed by a bulk wait, before this
// thread's later generic-proxy operations (e.g. the release that publishes them).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// Orders generic-proxy writes to shared memory before async-proxy (TMA) reads of it.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace xstage::dev
