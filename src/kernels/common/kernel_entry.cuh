// The body that every warp-specialised kernel entry (attention, MoE GEMMs, Mega-MoE) shares:
// the whole CTA runs Kernel::operator() on the dynamic shared memory. Device code exists only
// for sm_90a (wgmma, setmaxnreg and TMA multicast need the arch-specific features); any other
// target compiles an empty kernel. Each __global__ stays in its own header, so kernel names
// and launch bounds do not change.
//
// A macro, not a __forceinline__ function: the extra inlined call level changes the order in
// which the compiler inlines and optimises the kernel, and with it the register allocation
// (spills) of the 128-register W4A8 kernels (moe_w4a8_kernel); expanded in place, every entry
// compiles exactly as when it was written out.
#pragma once

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define XSTAGE_RUN_KERNEL(Kernel, params) \
  extern __shared__ char smem_buf[];      \
  Kernel{}(params, smem_buf)
#else
#define XSTAGE_RUN_KERNEL(Kernel, params)
#endif
