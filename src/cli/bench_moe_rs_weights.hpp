// The MoE layer bench's weights in the register-operand layouts (`xstage bench moe --weights
// w4a8-int4-lut-rs / w4a8-mxfp4-rs`, EpMoeRankInputs::w_layout; docs/megamoe.md "W4A8 on the
// register-operand GEMM"): a pool of 64 prepacked 128 x 128 chunks made by the real quantiser
// and prepacking from one random 128-row source matrix, tiled over every expert matrix in chunk
// order (expert, 128-row block, 128-K block) -> pool chunk (index mod 64). Every output row r
// of any tile then comes from source row r mod 128, so the per-row scales stay consistent along
// K, and the host reference rebuilds each expert's codes and scales from the same tiling.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_layer_ref.hpp"

namespace xstage::cli {

class RsWeightPool {
 public:
  // layout: int4_rs_lut (INT4 two-level) or mxfp4_rs; anything else is an InvalidArgument.
  explicit RsWeightPool(ops::MoeWeightLayout layout);
  ops::MoeWeightLayout layout() const { return layout_; }
  ops::MoeQuant quant() const;

  // Device copies for `experts` experts of [rows, cols] weights (rows, cols multiples of 128):
  // the prepacked chunks, and their scales (int4_rs_lut: channel scales [experts, rows];
  // mxfp4_rs: block scales [experts, cols/128, rows]). The caller frees them (cudaFree).
  void* upload_weights(int experts, int rows, int cols, cudaStream_t s) const;
  float* upload_scales(int experts, int rows, int cols, cudaStream_t s) const;

  // The same bytes and scales on the host (upload_scales copies host_scales; host_weights is for
  // tests: it holds the whole tensor).
  std::vector<uint8_t> host_weights(int experts, int rows, int cols) const;
  std::vector<float> host_scales(int experts, int rows, int cols) const;

  // Local expert `le` of the layer as uploaded (every rank the same), as the one-expert weights
  // of the host reference (two-level INT4, or MXFP4 with the register-operand flush bound).
  // per_token: the per-token recipe, whose Linear-1 reads W1's bytes as gate/up-interleaved rows
  // (prepacked row r is natural row ops::glu_source_row(r, 2I)); the uploaded bytes and scales are
  // the same, the reference's W1 is their natural order. h_from_bf16 (with per_token): h as the
  // fused per-token kernel makes it (MoeLayerWeights::per_token_h_from_bf16), else the unfused
  // layer's requantisation.
  ops::MoeLayerWeights expert(int hidden, int intermediate, int le, bool per_token = false,
                              bool h_from_bf16 = false) const;

 private:
  static constexpr int kChunks = 64;
  // Pool chunk of chunk (rb, kb) of local expert le's [rows, cols] matrix.
  static int chunk_of(int le, int rows, int cols, int rb, int kb) {
    const long long per = static_cast<long long>(rows / 128) * (cols / 128);
    return static_cast<int>((le * per + static_cast<long long>(rb) * (cols / 128) + kb) % kChunks);
  }
  // glu: natural row R is prepacked row r with glu_source_row(r, rows) = R.
  void expert_matrix(int rows, int cols, int le, bool glu, std::vector<uint8_t>& codes, std::vector<float>& scales,
                     std::vector<uint8_t>& groups, std::vector<uint8_t>& e8m0) const;

  ops::MoeWeightLayout layout_;
  std::vector<uint8_t> prepacked_;   // kChunks chunks
  std::vector<uint8_t> codes_;       // source codes [128, kChunks * 128 / 2]
  std::vector<uint8_t> groups_;      // int4 lut: e4m3 group scales [kChunks, 128]
  std::vector<float> channel_;       // int4 lut: channel scales [128]
  std::vector<uint8_t> e8m0_;        // mxfp4: exponents [kChunks * 4, 128]
  std::vector<float> block_scales_;  // mxfp4: [kChunks, 128]
  size_t chunk_bytes_ = 0;
};

}  // namespace xstage::cli
