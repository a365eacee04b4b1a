#include "cli/bench_moe_rs_weights.hpp"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_quant4.hpp"

namespace xstage::cli {

RsWeightPool::RsWeightPool(ops::MoeWeightLayout layout) : layout_(layout) {
  constexpr int kCols = 128 * kChunks;
  std::mt19937 rng(20261205u);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  codes_.resize(size_t(128) * kCols / 2);
  if (layout == ops::MoeWeightLayout::int4_rs_lut) {
    // Random weights whose rows and groups differ in magnitude (group scales over ~3 binades).
    std::vector<float> w(size_t(128) * kCols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = u(rng) * std::ldexp(1.f, -int((i / 128) % 4));
    groups_.resize(size_t(kChunks) * 128);
    channel_.resize(128);
    ops::quantize_int4_lut(w.data(), 128, kCols, codes_.data(), groups_.data(), channel_.data());
    chunk_bytes_ = size_t(ops::prepacked_int4_lut_rs_bytes(128, 128));
    prepacked_.resize(size_t(ops::prepacked_int4_lut_rs_bytes(128, kCols)));
    ops::prepack_int4_lut_rs(codes_.data(), groups_.data(), 128, kCols, prepacked_.data());
  } else if (layout == ops::MoeWeightLayout::mxfp4_rs) {
    // Random codes; exponents 2^-3 .. 2^0 (gaps 0..3 inside a 128-K block: nothing flushed).
    for (auto& b : codes_) b = static_cast<uint8_t>(rng());
    e8m0_.resize(size_t(kCols / 32) * 128);
    for (auto& b : e8m0_) b = static_cast<uint8_t>(124 + rng() % 4);
    block_scales_.resize(size_t(kChunks) * 128);
    chunk_bytes_ = size_t(ops::prepacked_mxfp4_rs_bytes(128, 128));
    prepacked_.resize(size_t(ops::prepacked_mxfp4_rs_bytes(128, kCols)));
    if (ops::prepack_mxfp4_rs(codes_.data(), e8m0_.data(), 128, kCols, prepacked_.data(), block_scales_.data()) != 0)
      throw Error("bench moe: the MXFP4 pool flushed a sub-block (its exponent gaps are 0..3)");
  } else {
    throw InvalidArgument(fmt::format("bench moe: no register-operand weight pool for layout {}",
                                      ops::moe_weight_layout_name(layout)));
  }
}

ops::MoeQuant RsWeightPool::quant() const {
  return layout_ == ops::MoeWeightLayout::int4_rs_lut ? ops::MoeQuant::w4a8_int4 : ops::MoeQuant::w4a8_mxfp4;
}

void* RsWeightPool::upload_weights(int experts, int rows, int cols, cudaStream_t s) const {
  const size_t chunks = size_t(experts) * (rows / 128) * (cols / 128);
  void* d = nullptr;
  XS_CUDA(cudaMalloc(&d, chunks * chunk_bytes_), "bench moe: register-operand weights");
  // Chunk i of the buffer is pool chunk i mod 64 (chunk_of): whole copies of the pool, then a part.
  for (size_t i = 0; i < chunks; i += kChunks) {
    const size_t n = std::min<size_t>(kChunks, chunks - i);
    XS_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(d) + i * chunk_bytes_, prepacked_.data(), n * chunk_bytes_,
                            cudaMemcpyHostToDevice, s),
            "bench moe: register-operand weights");
  }
  XS_CUDA(cudaStreamSynchronize(s), "bench moe: register-operand weights");
  return d;
}

std::vector<uint8_t> RsWeightPool::host_weights(int experts, int rows, int cols) const {
  const size_t chunks = size_t(experts) * (rows / 128) * (cols / 128);
  std::vector<uint8_t> h(chunks * chunk_bytes_);
  for (int e = 0; e < experts; ++e)
    for (int rb = 0; rb < rows / 128; ++rb)
      for (int kb = 0; kb < cols / 128; ++kb) {
        const size_t i = (size_t(e) * (rows / 128) + rb) * (cols / 128) + kb;  // the kernels' chunk order
        const size_t j = size_t(chunk_of(e, rows, cols, rb, kb));
        std::copy(prepacked_.begin() + j * chunk_bytes_, prepacked_.begin() + (j + 1) * chunk_bytes_,
                  h.begin() + i * chunk_bytes_);
      }
  return h;
}

std::vector<float> RsWeightPool::host_scales(int experts, int rows, int cols) const {
  std::vector<float> h;
  if (layout_ == ops::MoeWeightLayout::int4_rs_lut) {
    h.resize(size_t(experts) * rows);
    for (size_t i = 0; i < h.size(); ++i) h[i] = channel_[(i % rows) % 128];
  } else {
    const int kbs = cols / 128;
    h.resize(size_t(experts) * kbs * rows);
    for (int e = 0; e < experts; ++e)
      for (int kb = 0; kb < kbs; ++kb)
        for (int r = 0; r < rows; ++r)
          h[(size_t(e) * kbs + kb) * rows + r] = block_scales_[size_t(chunk_of(e, rows, cols, r / 128, kb)) * 128 + r % 128];
  }
  return h;
}

float* RsWeightPool::upload_scales(int experts, int rows, int cols, cudaStream_t s) const {
  const std::vector<float> h = host_scales(experts, rows, cols);
  float* d = nullptr;
  XS_CUDA(cudaMalloc(&d, sizeof(float) * h.size()), "bench moe: register-operand scales");
  XS_CUDA(cudaMemcpyAsync(d, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice, s),
          "bench moe: register-operand scales");
  XS_CUDA(cudaStreamSynchronize(s), "bench moe: register-operand scales");
  return d;
}

void RsWeightPool::expert_matrix(int rows, int cols, int le, bool glu, std::vector<uint8_t>& codes,
                                 std::vector<float>& scales, std::vector<uint8_t>& groups,
                                 std::vector<uint8_t>& e8m0) const {
  constexpr size_t kSrcRowBytes = size_t(kChunks) * 128 / 2;
  codes.assign(size_t(rows) * cols / 2, 0);
  const bool lut = layout_ == ops::MoeWeightLayout::int4_rs_lut;
  if (lut) {
    scales.resize(rows);
    groups.resize(size_t(cols / 128) * rows);
  } else {
    e8m0.resize(size_t(cols / 32) * rows);
  }
  // Prepacked row r (pool source row r mod 128 of its chunks) is natural row R.
  for (int r = 0; r < rows; ++r) {
    const int R = glu ? ops::glu_source_row(r, rows) : r;
    for (int kb = 0; kb < cols / 128; ++kb) {
      const int j = chunk_of(le, rows, cols, r / 128, kb);
      // 64 code bytes of source row r mod 128, columns [128 j, 128 j + 128): whole bytes.
      const uint8_t* src = codes_.data() + size_t(r % 128) * kSrcRowBytes + size_t(j) * 64;
      std::copy(src, src + 64, codes.begin() + size_t(R) * cols / 2 + size_t(kb) * 64);
      if (lut) {
        groups[size_t(kb) * rows + R] = groups_[size_t(j) * 128 + r % 128];
      } else {
        for (int sb = 4 * kb; sb < 4 * kb + 4; ++sb) e8m0[size_t(sb) * rows + R] = e8m0_[size_t(4 * j + sb % 4) * 128 + r % 128];
      }
    }
    if (lut) scales[R] = channel_[r % 128];
  }
}

ops::MoeLayerWeights RsWeightPool::expert(int hidden, int intermediate, int le, bool per_token, bool h_from_bf16) const {
  if (h_from_bf16 && !per_token)
    throw InvalidArgument("bench moe: the from-bf16 h recipe needs per-token activations");
  ops::MoeLayerWeights w;
  w.experts = 1;
  w.hidden = hidden;
  w.intermediate = intermediate;
  w.quant = quant();
  w.int4_two_level = layout_ == ops::MoeWeightLayout::int4_rs_lut;
  w.mxfp4_max_gap = ops::kMxfp4RsMaxExponentGap;
  w.per_token_activations = per_token;
  w.per_token_h_from_bf16 = h_from_bf16;
  expert_matrix(2 * intermediate, hidden, le, per_token, w.w1, w.w1_scales, w.w1_groups, w.w1_e8m0);
  expert_matrix(hidden, intermediate, le, false, w.w2, w.w2_scales, w.w2_groups, w.w2_e8m0);
  return w;
}

}  // namespace xstage::cli
