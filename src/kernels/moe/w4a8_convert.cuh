// 4-bit weights -> fp8 e4m3, the arithmetic of the W4A8 kernel's conversion units (w4a8.cuh),
// and its shared-memory accesses.
//
// Conversion of one 32-bit word of packed B (8 nibbles, K columns 0..7 in nibble order) is two
// halves of 4 nibbles x: idx = x & 0x7777 selects a magnitude from an 8-entry table with
// `prmt` (one table for codes 0..7 = P, one for codes 8..15 = N), and a final `prmt` picks P or
// N per byte by each nibble's bit 3 (selector 0x3210 | ((x >> 1) & 0x4444)). Tables:
//   int4  : P = e4m3(0..7), N = e4m3(-8..-1); exact, weight scale = the group-128 fp32 scale.
//   mxfp4 : per weight row and 128-K block, emax = max of the four E8M0 exponents; sub-block
//           u (32 K values, exponent e_u) is converted with P = e4m3(|E2M1| * 2^(6 - d)),
//           d = emax - e_u, N = P | 0x80 (sign), and the block's weight scale is
//           2^(emax - 133). Exact for d <= 14 (all values are e4m3 normals or multiples of
//           2^-9); a sub-block with d > 14 (its scale below 2^-14 of the block maximum) is
//           flushed to zero. The host reference ops::dequantize_mxfp4_w4a8 defines the same.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/moe/quant.cuh"

namespace xstage::kernels::moe {

// prmt (default mode): byte i of the result = byte sel[4i+2:4i] of {b, a}; every selector used
// here has bit 3 clear, where __byte_perm and prmt agree. The intrinsic lets the compiler keep
// the int4 tables as immediates.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) { return __byte_perm(a, b, sel); }

struct W4Lut {
  uint32_t p0, p1, n0, n1;  // P (codes 0..7) and N (codes 8..15), 4 entries per register
};

// int4: P = e4m3(0, 1, .., 7), N = e4m3(-8, -7, .., -1).
__device__ __forceinline__ W4Lut int4_lut() { return W4Lut{0x44403800u, 0x4E4C4A48u, 0xCACCCED0u, 0xB8C0C4C8u}; }

// mxfp4: P = e4m3({0, .5, 1, 1.5, 2, 3, 4, 6} * 2^(6 - d)), exact for 0 <= d <= 14; zero for d > 14.
__device__ __forceinline__ W4Lut mxfp4_lut(int d) {
  const float s = __int_as_float((133 - min(d, 14)) << 23);  // 2^(6 - d)
  const uint32_t p0 = static_cast<uint32_t>(fp8x2_e4m3(0.f, 0.5f * s)) |
                      (static_cast<uint32_t>(fp8x2_e4m3(s, 1.5f * s)) << 16);
  const uint32_t p1 = static_cast<uint32_t>(fp8x2_e4m3(2.f * s, 3.f * s)) |
                      (static_cast<uint32_t>(fp8x2_e4m3(4.f * s, 6.f * s)) << 16);
  W4Lut l;
  l.p0 = d > 14 ? 0u : p0;
  l.p1 = d > 14 ? 0u : p1;
  l.n0 = l.p0 | 0x80808080u;
  l.n1 = l.p1 | 0x80808080u;
  return l;
}

// 2^(emax - 133) as fp32 (a subnormal for emax < 7).
__device__ __forceinline__ float mxfp4_block_scale(int emax) {
  return emax >= 7 ? __int_as_float((emax - 6) << 23) : __int_as_float(1 << (emax + 16));
}

// Nibbles 0..3 of x (K columns in nibble order) -> 4 e4m3 bytes (column i in byte i).
__device__ __forceinline__ uint32_t convert4(uint32_t x, W4Lut const& l) {
  const uint32_t idx = x & 0x7777u;
  const uint32_t pos = prmt(l.p0, l.p1, idx);
  const uint32_t neg = prmt(l.n0, l.n1, idx);
  return prmt(pos, neg, 0x3210u | ((x >> 1) & 0x4444u));
}

__device__ __forceinline__ uint4 ld_shared_u4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

}  // namespace xstage::kernels::moe
