// The prepacked 4-bit weight layout of the register-operand W4A8 kernel (w4a8_rs.cuh), host and
// device. That kernel swaps the GEMM's operands: the weights are wgmma's A operand, read from
// registers, so each thread must find its A fragment's nibbles in one place. The prepacked
// layout puts them there: per expert, per 128-row weight block rb and 128-K block kb, one
// 8192-byte chunk at ((e * n/128 + rb) * k/128 + kb) * 8192, holding
//   [warp group g (rows 64g..64g+63)][half h (K steps 2h, 2h+1)][thread t of the group][16 B]
// so a consumer thread reads a K block with two conflict-free 16-byte shared loads. Inside a
// thread's 16 bytes: K step j = 2h + s at byte 8s, then the four 32-bit A-fragment registers of
// the m64k32 e4m3 wgmma (CuTe ALayout_64x32) as 16 bits (4 nibbles, K ascending) each:
//   reg 0: row r0,     K 4q..4q+3      reg 1: row r0 + 8, K 4q..4q+3
//   reg 2: row r0,     K 16+4q..19+4q  reg 3: row r0 + 8, K 16+4q..19+4q
// with r0 = 16 * (t / 32) + (t % 32) / 4 and q = t % 4 (rows inside the group, K inside the
// 32-wide step). The nibble values are those of the row-major format (moe_quant4.hpp); only
// their place changes, so prepacking is a permutation of nibbles.
#pragma once
#include <cstdint>

namespace xstage::kernels::moe {

inline constexpr int kRsChunkBytes = 8192;  // 128 weight rows x 128 K nibbles

struct RsNibblePos {
  int64_t byte;  // byte offset from the start of the expert's prepacked weights
  int high;      // 1: the high nibble of that byte
};

// Where weight (row, col) of an expert with k columns lands (row < n, col < k, both multiples
// of 128 in n and k).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline RsNibblePos rs_nibble_pos(int row, int col, int k) {
  const int rb = row / 128, g = (row % 128) / 64, rr = row % 64;
  const int warp = rr / 16, hi_row = (rr % 16) / 8, lane_row = rr % 8;
  const int kb = col / 128, kk = col % 128;
  const int step = kk / 32, kj = kk % 32;
  const int hi_k = kj / 16, q = (kj % 16) / 4, nib = kj % 4;
  const int t = 32 * warp + 4 * lane_row + q;
  const int reg = hi_row + 2 * hi_k;
  const int nib_in_chunk = ((g * 2 + step / 2) * 128 + t) * 32 + (step % 2) * 16 + reg * 4 + nib;
  const int64_t chunk = static_cast<int64_t>(rb) * (k / 128) + kb;
  return RsNibblePos{chunk * kRsChunkBytes + nib_in_chunk / 2, nib_in_chunk % 2};
}

}  // namespace xstage::kernels::moe
