// The prepacked 4-bit weight layout of the register-operand W4A8 kernel (w4a8_rs.cuh), host and
// device. That kernel swaps the GEMM's operands: the weights are wgmma's A operand, read from
// registers, so each thread must find its A fragment's values in one place, in a code that
// converts to e4m3 in few instructions. The prepacked layout does both.
//
// Where: per expert, per 128-row weight block rb and 128-K block kb, one 8192-byte chunk at
// ((e * n/128 + rb) * k/128 + kb) * 8192, holding
//   [warp group g (rows 64g..64g+63)][half h (K steps 2h, 2h+1)][thread t of the group][16 B]
// so a consumer thread reads a K block with two conflict-free 16-byte shared loads. Inside a
// thread's 16 bytes, K step j = 2h + s is the two 32-bit words at byte 8s; word w (0, 1) holds
// the A-fragment registers 2w ("group A") and 2w + 1 ("group B") of the m64k32 e4m3 wgmma
// (CuTe ALayout_64x32):
//   reg 0: row r0,     K 4q..4q+3      reg 1: row r0 + 8, K 4q..4q+3
//   reg 2: row r0,     K 16+4q..19+4q  reg 3: row r0 + 8, K 16+4q..19+4q
// with r0 = 16 * (t / 32) + (t % 32) / 4 and q = t % 4 (rows inside the group, K inside the
// 32-wide step); value i of a register (i = 0..3) is K column 4q + i (+16).
//
// Code: symmetric INT4, q in -7..7, as sign s and magnitude m = |q| (3 bits). In a word,
//   group A value i: m at bits 4i..4i+2,       s at bit 8i + 7
//   group B value i: m at bits 16+4i..16+4i+2, s at bit 8i + 3
// so e4m3 register A = prmt(T, x & 0x7777) | (x & 0x80808080) and B = prmt(T, (x >> 16) &
// 0x7777) | ((x << 4) & 0x80808080), T = e4m3(0..7): 8 integer instructions per 8 values
// (two's complement nibbles take 13). The INT4 code -8 has no sign-magnitude form; the
// quantiser of moe_quant4.hpp never produces it (scale = amax / 7), and prepacking rejects it.
//
// MXFP4 (kRsMxChunkBytes chunks): E2M1 is sign + 3-bit magnitude already, stored at the same
// bits. Each chunk has 512 more bytes, the exponent gaps: for consumer thread t of warp group g
// the 8 bytes at 8192 + 8 * (32 * g + 8 * (t / 32) + (t % 32) / 4) hold 8 * gap for rows r0
// (bytes 0..3: K steps 0..3 = the block's four 32-value sub-blocks) and r0 + 8 (bytes 4..7),
// gap = emax - e of the sub-block (emax: the largest of the row's four exponents in the 128-K
// block). The kernel turns the table e4m3({0, 1/2, 1, 3/2, 2, 3, 4, 6} * 2^6) into the
// sub-block's table e4m3(. * 2^(6 - gap)) by subtracting 8 * gap from every nonzero byte (an
// exponent shift, exact while the result stays normal: gap <= kRsMxMaxGap); prepacking zeroes
// the codes of sub-blocks with a larger gap (ops::prepack_mxfp4_rs).
//
// INT4 with two-level scales (kRsLutChunkBytes chunks, MoeWeightLayout::int4_rs_lut): the codes
// as for int4_rs, and 1024 more bytes per chunk, the conversion tables: for consumer thread t of
// warp group g the 16 bytes at 8192 + 16 * (32 * g + 8 * (t / 32) + (t % 32) / 4) hold row r0's
// table (bytes 0..7) and row r0 + 8's (bytes 8..15), byte m = e4m3(m * gs) for magnitude m =
// 0..7, gs = the row's e4m3 group scale of this 128-K block (ops::quantize_int4_lut). The
// kernel converts with the row's table instead of e4m3(0..7), so the group scale is applied
// before the wgmma and only the fp32 channel scale (per row, constant along K) is left for the
// epilogue: the promotion is one FFMA per value (acc += part * a_scale[token]), as in W8A8.
#pragma once
#include <cstdint>

namespace xstage::kernels::moe {

inline constexpr int kRsChunkBytes = 8192;     // 128 weight rows x 128 K values
inline constexpr int kRsMxGapBytes = 512;      // MXFP4: 8 * gap per row per 32-value sub-block
inline constexpr int kRsMxChunkBytes = kRsChunkBytes + kRsMxGapBytes;
inline constexpr int kRsMxMaxGap = 11;         // e4m3(1/2 * 2^(6 - 11)) = 2^-6, the smallest normal
inline constexpr int kRsLutTableBytes = 1024;  // INT4 two-level: 8 table bytes per row per 128-K block
inline constexpr int kRsLutChunkBytes = kRsChunkBytes + kRsLutTableBytes;

struct RsCodePos {
  int64_t word_byte;  // byte offset of the 32-bit word from the start of the expert's weights
  int mag_bit;        // lowest bit of the 3-bit magnitude in that word
  int sign_bit;       // the sign bit
};

// Where a weight row's values sit for its consumer thread: 128-row block rb, warp group g, and
// inside the group warp `warp`, row of the quad column `lane_row`, upper half of the fragment
// (row r0 + 8) `hi_row`.
struct RsRowPos {
  int rb, g, warp, hi_row, lane_row;
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline RsRowPos rs_row_pos(int row) {
  const int rr = row % 64;
  return RsRowPos{row / 128, (row % 128) / 64, rr / 16, (rr % 16) / 8, rr % 8};
}

// Where weight (row, col) of an expert with k columns goes (n and k multiples of 128).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline RsCodePos rs_code_pos(int row, int col, int k, int chunk_bytes = kRsChunkBytes) {
  const RsRowPos rp = rs_row_pos(row);
  const int kb = col / 128, kk = col % 128;
  const int step = kk / 32, kj = kk % 32;
  const int hi_k = kj / 16, q = (kj % 16) / 4, i = kj % 4;
  const int t = 32 * rp.warp + 4 * rp.lane_row + q;
  const int reg = rp.hi_row + 2 * hi_k;  // A-fragment register of the K step
  const int in_chunk = ((rp.g * 2 + step / 2) * 128 + t) * 16 + (step % 2) * 8 + (reg / 2) * 4;
  const int64_t chunk = static_cast<int64_t>(rp.rb) * (k / 128) + kb;
  const bool group_b = (reg % 2) != 0;
  return RsCodePos{chunk * chunk_bytes + in_chunk, (group_b ? 16 : 0) + 4 * i, 8 * i + (group_b ? 3 : 7)};
}

// MXFP4: where the gap byte of weight row `row`, 32-value sub-block `sub` (= col / 32) goes.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t rs_gap_pos(int row, int sub, int k) {
  const RsRowPos rp = rs_row_pos(row);
  const int64_t chunk = static_cast<int64_t>(rp.rb) * (k / 128) + sub / 4;
  return chunk * kRsMxChunkBytes + kRsChunkBytes + 8 * (32 * rp.g + 8 * rp.warp + rp.lane_row) + 4 * rp.hi_row +
         sub % 4;
}

// INT4 two-level: where the 8-byte table of weight row `row`, 128-K block `kb` goes (byte m of
// it: magnitude m).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t rs_lut_table_pos(int row, int kb, int k) {
  const RsRowPos rp = rs_row_pos(row);
  const int64_t chunk = static_cast<int64_t>(rp.rb) * (k / 128) + kb;
  return chunk * kRsLutChunkBytes + kRsChunkBytes + 16 * (32 * rp.g + 8 * rp.warp + rp.lane_row) + 8 * rp.hi_row;
}

}  // namespace xstage::kernels::moe
