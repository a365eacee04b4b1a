// The layer bench's register-operand weights (src/cli/bench_moe_rs_weights.*): what the host
// reference rebuilds for an expert, prepacked by the library's own prepacking, is byte for byte
// what the bench uploads for it, and its scales are the uploaded scales -- so a bench cell
// checks the kernel against the weights it really read.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <vector>

#include "cli/bench_moe_rs_weights.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_quant4.hpp"

using namespace xstage;

namespace {

// Expert le's [rows, cols] matrix of `w` (one expert) prepacked, and its scales; glu: W1 in the
// gate/up-interleaved layout (the per-token Linear-1).
void prepack_expert(const ops::MoeLayerWeights& w, ops::MoeWeightLayout l, bool w1, bool glu,
                    std::vector<uint8_t>& bytes, std::vector<float>& scales) {
  const int rows = w1 ? 2 * w.intermediate : w.hidden, cols = w1 ? w.hidden : w.intermediate;
  const auto& q = w1 ? w.w1 : w.w2;
  if (l == ops::MoeWeightLayout::int4_rs_lut) {
    bytes.resize(size_t(ops::prepacked_int4_lut_rs_bytes(rows, cols)));
    scales = w1 ? w.w1_scales : w.w2_scales;
    if (glu)
      ops::prepack_int4_lut_rs_glu(q.data(), w.w1_groups.data(), w.w1_scales.data(), rows, cols, bytes.data(),
                                   scales.data());
    else
      ops::prepack_int4_lut_rs(q.data(), (w1 ? w.w1_groups : w.w2_groups).data(), rows, cols, bytes.data());
  } else {
    bytes.resize(size_t(ops::prepacked_mxfp4_rs_bytes(rows, cols)));
    scales.resize(size_t(cols / 128) * rows);
    const auto& e8 = w1 ? w.w1_e8m0 : w.w2_e8m0;
    EXPECT_EQ(glu ? ops::prepack_mxfp4_rs_glu(q.data(), e8.data(), rows, cols, bytes.data(), scales.data())
                  : ops::prepack_mxfp4_rs(q.data(), e8.data(), rows, cols, bytes.data(), scales.data()),
              0);
  }
}

}  // namespace

TEST(BenchMoeRsWeights, ReferenceExpertsPrepackToTheUploadedBytes) {
  // 48 chunks per W1 and 24 per W2 expert: three experts wrap the 64-chunk pool.
  const int E = 3, H = 1024, I = 384;
  for (auto l : {ops::MoeWeightLayout::int4_rs_lut, ops::MoeWeightLayout::mxfp4_rs}) {
    const cli::RsWeightPool pool(l);
    for (int pass = 0; pass < 3; ++pass) {
      const bool w1 = pass != 1, per_token = pass == 2;  // W1, W2, then W1 as the per-token recipe reads it
      const int rows = w1 ? 2 * I : H, cols = w1 ? H : I;
      const std::vector<uint8_t> dev = pool.host_weights(E, rows, cols);
      const std::vector<float> dev_scales = pool.host_scales(E, rows, cols);
      ASSERT_EQ(dev.size() % E, 0u);
      ASSERT_EQ(dev_scales.size() % E, 0u);
      const size_t per = dev.size() / E, per_s = dev_scales.size() / E;
      for (int le = 0; le < E; ++le) {
        const ops::MoeLayerWeights w = pool.expert(H, I, le, per_token);
        EXPECT_EQ(w.quant, pool.quant());
        EXPECT_EQ(w.per_token_activations, per_token);
        std::vector<uint8_t> bytes;
        std::vector<float> scales;
        prepack_expert(w, l, w1, per_token, bytes, scales);
        ASSERT_EQ(bytes.size(), per);
        ASSERT_EQ(scales.size(), per_s);
        EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), dev.begin() + le * per))
            << ops::moe_weight_layout_name(l) << " pass " << pass << " expert " << le;
        EXPECT_TRUE(std::equal(scales.begin(), scales.end(), dev_scales.begin() + le * per_s))
            << ops::moe_weight_layout_name(l) << " pass " << pass << " expert " << le << " scales";
      }
      // Not all one chunk: the experts differ.
      EXPECT_FALSE(std::equal(dev.begin(), dev.begin() + per, dev.begin() + per));
    }
  }
  EXPECT_THROW(cli::RsWeightPool(ops::MoeWeightLayout::rows), InvalidArgument);
}

// The fused per-token cells' reference: the same weights, h as the fused kernel makes it; the
// recipe needs per-token activations.
TEST(BenchMoeRsWeights, FusedPerTokenReferenceIsTheFromBf16Recipe) {
  const cli::RsWeightPool pool(ops::MoeWeightLayout::int4_rs_lut);
  const ops::MoeLayerWeights requant = pool.expert(256, 128, 1, true), fused = pool.expert(256, 128, 1, true, true);
  EXPECT_FALSE(requant.per_token_h_from_bf16);
  EXPECT_TRUE(fused.per_token_h_from_bf16);
  EXPECT_TRUE(fused.per_token_activations);
  EXPECT_EQ(fused.w1, requant.w1);
  EXPECT_EQ(fused.w2, requant.w2);
  EXPECT_THROW(pool.expert(256, 128, 1, false, true), InvalidArgument);
}
#endif  // XSTAGE_HAVE_MOE
