// Attention operator without a GPU: validation (one clear error per problem), the choice of
// instantiation, the FLOP count, and the fp32 host reference on tiny hand-made problems.
#ifdef XSTAGE_HAVE_ATTENTION
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/launch.hpp"
#include "kernels/attention/tile_rules.hpp"
#include "kernels/attention/split_plan.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/attention.hpp"

using namespace xstage;
using ops::AttentionArgs;
using ops::AttentionDType;

namespace {

void* fake(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

AttentionArgs good_args() {
  AttentionArgs a;
  a.dtype = AttentionDType::bf16;
  a.batch = 2;
  a.heads = 3;
  a.q_len = 77;
  a.kv_len = 100;
  a.head_dim = 128;
  a.q = fake(0x10000);
  a.k = fake(0x20000);
  a.v = fake(0x30000);
  a.o = fake(0x40000);
  a.q_strides = a.o_strides = ops::packed_bshd(a.q_len, a.heads, a.head_dim);
  a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, a.head_dim);
  return a;
}

// Expects InvalidArgument whose message contains `needle`.
template <class F>
void expect_invalid(F&& mutate, const std::string& needle) {
  AttentionArgs a = good_args();
  mutate(a);
  try {
    ops::validate(a);
    ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    EXPECT_EQ(m.rfind("attention:", 0), 0u) << m;
  }
}

}  // namespace

TEST(AttentionValidate, AcceptsGoodArguments) {
  EXPECT_NO_THROW(ops::validate(good_args()));
  AttentionArgs a = good_args();
  a.head_dim = 64;
  a.q_strides = a.o_strides = ops::packed_bshd(a.q_len, a.heads, 64);
  a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, 64);
  a.dtype = AttentionDType::fp16;
  a.causal = true;
  a.return_lse = true;
  a.lse = static_cast<float*>(fake(0x50004));  // 4-byte alignment is enough for the LSE
  EXPECT_NO_THROW(ops::validate(a));
  // A packed QKV slice: q/k/v 256 bytes apart, seq stride 3*H*D.
  AttentionArgs p = good_args();
  p.kv_len = p.q_len;
  ops::BSHDStrides st;
  st.h = 128;
  st.s = 3 * 3 * 128;
  st.b = int64_t(p.q_len) * st.s;
  p.q_strides = p.k_strides = p.v_strides = st;
  p.k = fake(0x10000 + 3 * 128 * 2);
  p.v = fake(0x10000 + 2 * 3 * 128 * 2);
  EXPECT_NO_THROW(ops::validate(p));
  // Strides of extent-1 modes are never used, whatever they are.
  AttentionArgs one = good_args();
  one.batch = 1;
  one.q_strides.b = 3;
  EXPECT_NO_THROW(ops::validate(one));
}

TEST(AttentionValidate, RejectsEachProblemWithOneLine) {
  expect_invalid([](AttentionArgs& a) { a.dtype = static_cast<AttentionDType>(7); }, "dtype");
  expect_invalid([](AttentionArgs& a) { a.head_dim = 96; }, "head dim 96");
  expect_invalid([](AttentionArgs& a) { a.head_dim = 256; }, "head dim 256");
  expect_invalid([](AttentionArgs& a) { a.batch = 0; }, "sizes must be positive");
  expect_invalid([](AttentionArgs& a) { a.heads = -1; }, "sizes must be positive");
  expect_invalid([](AttentionArgs& a) { a.q_len = 0; }, "q_len 0");
  expect_invalid([](AttentionArgs& a) { a.kv_len = 0; }, "kv_len 0");
  expect_invalid([](AttentionArgs& a) { a.q = nullptr; }, "q is a null pointer");
  expect_invalid([](AttentionArgs& a) { a.o = nullptr; }, "o is a null pointer");
  expect_invalid([](AttentionArgs& a) { a.k = fake(0x20008); }, "k = ");
  expect_invalid([](AttentionArgs& a) { a.v = fake(0x30002); }, "16-byte aligned");
  expect_invalid([](AttentionArgs& a) { a.q_strides.d = 2; }, "q head-dim stride is 2, must be 1");
  expect_invalid([](AttentionArgs& a) { a.k_strides.s = 100; }, "k seq-stride 100");
  expect_invalid([](AttentionArgs& a) { a.v_strides.h = 4; }, "multiple of 8 elements");
  expect_invalid([](AttentionArgs& a) { a.o_strides.b = -8; }, "o batch-stride -8");
  expect_invalid([](AttentionArgs& a) { a.q_strides.h = 0; }, "q head-stride 0");
  expect_invalid([](AttentionArgs& a) { a.k_strides.s = int64_t(1) << 40; }, "2^40");
  expect_invalid([](AttentionArgs& a) { a.return_lse = true; }, "lse buffer is null");
  expect_invalid(
      [](AttentionArgs& a) {
        a.return_lse = true;
        a.lse = static_cast<float*>(fake(0x50002));
      },
      "4-byte aligned");
  expect_invalid(
      [](AttentionArgs& a) {
        a.return_lse = true;
        a.lse = static_cast<float*>(fake(0x50000));
        a.lse_stride_h = 10;
        a.lse_stride_b = 1000;
      },
      "lse strides");
  expect_invalid([](AttentionArgs& a) { a.softmax_scale = -1.f; }, "softmax scale");
  expect_invalid([](AttentionArgs& a) { a.softmax_scale = NAN; }, "softmax scale");
  expect_invalid([](AttentionArgs& a) { a.num_ctas = -2; }, "num_ctas");
  expect_invalid([](AttentionArgs& a) { a.tile_policy = static_cast<ops::AttentionTilePolicy>(9); }, "tile policy");
  expect_invalid(
      [](AttentionArgs& a) {
        a.batch = 1 << 20;
        a.heads = 1 << 10;
        a.q_len = 1 << 12;
      },
      "tiles");
}

TEST(AttentionDispatch, PicksTheShippedInstantiation) {
  for (AttentionDType t : {AttentionDType::bf16, AttentionDType::fp16})
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        const ops::AttentionInstantiation k = ops::select_instantiation(t, d, causal);
        const std::string want = std::string(ops::dtype_name(t)) + "_d" + std::to_string(d) +
                                 (causal ? "_causal" : "_noncausal");
        EXPECT_EQ(k.name, want);
        EXPECT_EQ(k.block_m % 64, 0);
        EXPECT_EQ(k.consumer_warpgroups, k.block_m / 64);
        EXPECT_EQ(k.threads, 128 * (1 + k.consumer_warpgroups));
        EXPECT_GT(k.smem_bytes, 0);
        EXPECT_LE(k.smem_bytes, 227 * 1024) << "fits an sm_90 SM";
        EXPECT_GE(k.stages, 2);
        EXPECT_LE(128 * k.producer_regs + 128 * k.consumer_warpgroups * k.consumer_regs, 65536);
        EXPECT_EQ(k.block_m, d == 64 ? 192 : 128);
        EXPECT_EQ(k.block_n, 128);
        EXPECT_EQ(k.q_stages, XSTAGE_ATTN_Q_STAGES) << "the build's Q buffers (docs/attention.md §Design)";
      }
  EXPECT_THROW(ops::select_instantiation(AttentionDType::bf16, 96, false), InvalidArgument);
  EXPECT_THROW(ops::select_instantiation(static_cast<AttentionDType>(5), 128, false), InvalidArgument);
}

// The operator's tile choice: the 128 x 192 long-key tile only for d = 128, non-causal,
// kv_len >= 8192 under the automatic policy; the staged tile otherwise.
TEST(AttentionDispatch, LongKeySetsGetTheLongTileUnlessStagedIsAsked) {
  using P = ops::AttentionTilePolicy;
  for (AttentionDType t : {AttentionDType::bf16, AttentionDType::fp16}) {
    const std::string dt = ops::dtype_name(t);
    for (int kv : {1, 8191, 8192, 65536}) {
      const bool long_kv = kv >= 8192;
      const auto k = ops::select_instantiation(t, 128, false, kv);
      EXPECT_EQ(k.name, dt + (long_kv ? "_d128_noncausal_longkv" : "_d128_noncausal")) << kv;
      EXPECT_EQ(k.block_n, long_kv ? 192 : 128) << kv;
      EXPECT_EQ(k.block_m, 128);
      EXPECT_EQ(k.lazy_rescale, 2);
      EXPECT_LE(k.smem_bytes, 227 * 1024) << "fits an sm_90 SM";
      // The long-key tile's K/V stages leave room for one Q buffer; the staged tile has what
      // the build chose for every local-output tile (docs/attention.md §Design "Q buffers").
      EXPECT_EQ(k.q_stages, long_kv ? 1 : XSTAGE_ATTN_Q_STAGES) << kv;
      EXPECT_LE(128 * k.producer_regs + 128 * k.consumer_warpgroups * k.consumer_regs, 65536);
      EXPECT_EQ(ops::select_instantiation(t, 128, false, kv, P::staged).name, dt + "_d128_noncausal") << kv;
      // No long tile for causal or d = 64.
      EXPECT_EQ(ops::select_instantiation(t, 128, true, kv).name, dt + "_d128_causal");
      EXPECT_EQ(ops::select_instantiation(t, 64, false, kv).name, dt + "_d64_noncausal");
    }
  }
  EXPECT_THROW(ops::select_instantiation(AttentionDType::bf16, 128, false, 9000, static_cast<P>(7)), InvalidArgument);
}

// The 128-row d = 64 tile when asked for (rows128); the shape-less lookup never picks it (the
// automatic rule needs the whole shape: AutomaticRows128ByWaves); causal and non-causal, both
// dtypes; other head dims are refused.
TEST(AttentionDispatch, Rows128IsTheD64TileOnlyWhenAskedFor) {
  using P = ops::AttentionTilePolicy;
  for (AttentionDType t : {AttentionDType::bf16, AttentionDType::fp16}) {
    const std::string dt = ops::dtype_name(t);
    for (bool causal : {false, true}) {
      const std::string mask = causal ? "_causal" : "_noncausal";
      for (int kv : {1, 1024, 65536}) {
        const auto k = ops::select_instantiation(t, 64, causal, kv, P::rows128);
        EXPECT_EQ(k.name, dt + "_d64" + mask + "_rows128") << kv;
        EXPECT_EQ(k.block_m, 128);
        EXPECT_EQ(k.block_n, 128);
        EXPECT_EQ(k.consumer_warpgroups, 2);
        EXPECT_EQ(k.q_stages, XSTAGE_ATTN_Q_STAGES);
        EXPECT_LE(k.smem_bytes, 227 * 1024) << "fits an sm_90 SM";
        EXPECT_LE(128 * k.producer_regs + 128 * k.consumer_warpgroups * k.consumer_regs, 65536);
        EXPECT_EQ(ops::select_instantiation(t, 64, causal, kv).name, dt + "_d64" + mask) << kv;
      }
    }
    EXPECT_THROW(ops::select_instantiation(t, 128, false, 1024, P::rows128), InvalidArgument);
    // The split tiles: non-causal d = 64 and 128, 128 x 128, any key count.
    for (int d : {64, 128}) {
      for (int kv : {1, 1024, 65536}) {
        const auto k = ops::select_instantiation(t, d, false, kv, P::split);
        EXPECT_EQ(k.name, dt + "_d" + std::to_string(d) + "_noncausal_split") << kv;
        EXPECT_EQ(k.q_stages, XSTAGE_ATTN_Q_STAGES);
        EXPECT_EQ(k.block_m, 128);
        EXPECT_EQ(k.block_n, 128);
        EXPECT_LE(k.smem_bytes, 227 * 1024);
        EXPECT_LE(128 * k.producer_regs + 128 * k.consumer_warpgroups * k.consumer_regs, 65536);
      }
      EXPECT_THROW(ops::select_instantiation(t, d, true, 1024, P::split), InvalidArgument);
    }
  }
}

// The 64-row key-groups tiles (rows64, docs/attention.md §Key groups) when asked for: causal d = 64
// and non-causal d = 128, both dtypes, two consumer groups on 64 rows, two Q buffers in every build;
// the other combinations and the claimed order are refused with one line.
TEST(AttentionDispatch, Rows64IsTheKeyGroupsTile) {
  if (!xstage::kernels::attention::kKeyGroupsBuilt) GTEST_SKIP() << "no key-group kernels in this build (XSTAGE_ATTN_INTRA_WG_OVERLAP=OFF)";
  using P = ops::AttentionTilePolicy;
  auto refused = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    }
  };
  for (AttentionDType t : {AttentionDType::bf16, AttentionDType::fp16}) {
    const std::string dt = ops::dtype_name(t);
    for (int kv : {1, 2048, 65536}) {
      const auto k = ops::select_instantiation(t, 64, true, kv, P::rows64);
      EXPECT_EQ(k.name, dt + "_d64_causal_rows64") << kv;
      EXPECT_EQ(k.block_m, 64);
      EXPECT_EQ(k.block_n, 128);
      EXPECT_EQ(k.consumer_warpgroups, 2);
      EXPECT_EQ(k.q_stages, 2);
      EXPECT_TRUE(k.pingpong);
      EXPECT_LE(k.smem_bytes, 227 * 1024) << "fits an sm_90 SM";
      EXPECT_LE(128 * k.producer_regs + 128 * k.consumer_warpgroups * k.consumer_regs, 65536);
    }
    const auto k128 = ops::select_instantiation(t, 128, false, 1024, P::rows64);
    EXPECT_EQ(k128.name, dt + "_d128_noncausal_rows64");
    EXPECT_EQ(k128.block_m, 64);
    EXPECT_EQ(k128.stages, 4);
    EXPECT_EQ(k128.block_n, 64);
    EXPECT_LE(k128.smem_bytes, 227 * 1024);
    EXPECT_EQ(ops::select_instantiation(t, 64, false, 1024, P::rows64).name, dt + "_d64_noncausal_rows64");
    refused([&] { ops::select_instantiation(t, 128, true, 1024, P::rows64); }, "d = 64 and non-causal d = 128");
  }
  AttentionArgs a = good_args();
  a.head_dim = 64;
  a.causal = true;
  a.tile_policy = P::rows64;
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d64_causal_rows64");
  EXPECT_EQ(ops::causal_order_for(a), causal::TileOrder::grouped) << "auto never resolves to claimed on rows64";
  a.causal_order = causal::TileOrder::claimed;
  refused([&] { ops::validate(a); }, "tile policy rows64 takes a static order");
}

// The non-causal d = 128 rule (tile_rules.hpp noncausal_d128_tile), 132 CTAs: the key-group tile on
// launches of about one round where its 64-row items finish first (measured 1.12-1.13x at S 1024 with
// 4 / 8 heads, 1100 with 4, 2048 with 4 on one H100), never where both tiles run several rounds
// (0.70-0.75x there); a split into 3 or more parts keeps the split tile, a 2-part split gives way.
TEST(AttentionDispatch, NonCausalD128KeyGroupsOnOneRoundLaunches) {
  if (!xstage::kernels::attention::kKeyGroupsBuilt) GTEST_SKIP() << "no key-group kernels in this build (XSTAGE_ATTN_INTRA_WG_OVERLAP=OFF)";
  namespace ka = xstage::kernels::attention;
  using T = ka::NonCausalD128Tile;
  EXPECT_EQ(ka::noncausal_d128_tile(1024, 1024, 8, 132, true), T::rows64);   // 128 items of 5 vs 64 tiles of 9
  EXPECT_EQ(ka::noncausal_d128_tile(1024, 1024, 4, 132, true), T::rows64);
  EXPECT_EQ(ka::noncausal_d128_tile(1100, 1100, 4, 132, true), T::rows64);
  EXPECT_EQ(ka::noncausal_d128_tile(2048, 2048, 4, 132, true), T::rows64);   // over a 2-part split
  EXPECT_EQ(ka::noncausal_d128_tile(2048, 2048, 4, 132, false), T::rows64);
  EXPECT_EQ(ka::noncausal_d128_tile(4096, 4096, 1, 132, true), T::split);    // 4 parts
  EXPECT_EQ(ka::noncausal_d128_tile(4608, 4608, 4, 132, true), T::split);    // last wave split
  for (int h : {12, 16, 24, 40}) EXPECT_EQ(ka::noncausal_d128_tile(1024, 1024, h, 132, true), T::staged) << h;
  // d = 64: the same on one-round launches of 128-row tiles, never past one round (S 1024 with 24
  // heads keeps the partial-tiles kernel).
  using T64 = ka::NonCausalD64Tile;
  EXPECT_EQ(ka::noncausal_d64_tile(1024, 1024, 8, 132), T64::rows64);
  EXPECT_EQ(ka::noncausal_d64_tile(1024, 1024, 4, 132), T64::rows64);
  EXPECT_EQ(ka::noncausal_d64_tile(1024, 1024, 12, 132), T64::rows128);
  EXPECT_EQ(ka::noncausal_d64_tile(1024, 1024, 24, 132), T64::partial);
  EXPECT_EQ(ka::noncausal_d64_tile(4096, 4096, 8, 132), T64::rows128);
  for (int h : {8, 16, 24, 40}) EXPECT_EQ(ka::noncausal_d128_tile(4096, 4096, h, 132, true), T::staged) << h;
  EXPECT_EQ(ka::noncausal_d128_tile(2500, 2500, 8, 132, true), T::split);
  AttentionArgs a = good_args();
  a.num_ctas = 132;
  a.batch = 1;
  a.heads = 8;
  a.q_len = a.kv_len = 1024;
  a.q_strides = a.o_strides = ops::packed_bshd(a.q_len, a.heads, 128);
  a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, 128);
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d128_noncausal_rows64");
  a.tile_policy = ops::AttentionTilePolicy::staged;
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d128_noncausal");
  a.tile_policy = ops::AttentionTilePolicy::automatic;
  a.q_len = a.kv_len = 8192;  // the long-key tile from 8192 keys
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d128_noncausal_longkv");
}

TEST(AttentionFlops, CountsVisiblePairs) {
  AttentionArgs a = good_args();
  a.batch = 1;
  a.heads = 12;
  a.q_len = a.kv_len = 4096;
  a.head_dim = 128;
  EXPECT_DOUBLE_EQ(ops::attention_flops(a), 4.0 * 12 * 4096.0 * 4096.0 * 128);
  a.causal = true;
  EXPECT_DOUBLE_EQ(ops::attention_flops(a), 4.0 * 12 * 128 * (4096.0 * 4097.0 / 2));
  a.heads = 1;
  a.head_dim = 64;
  a.q_len = 5;
  a.kv_len = 3;  // rows see 1, 2, 3, 3, 3 keys
  EXPECT_DOUBLE_EQ(ops::attention_flops(a), 4.0 * 64 * 12);
}

namespace {

struct HostProblem {
  AttentionArgs a;
  std::vector<float> q, k, v, o, lse;
  HostProblem(int b, int h, int sq, int skv, int d, bool causal) {
    a = good_args();
    a.batch = b;
    a.heads = h;
    a.q_len = sq;
    a.kv_len = skv;
    a.head_dim = d;
    a.causal = causal;
    a.q_strides = a.o_strides = ops::packed_bshd(sq, h, d);
    a.k_strides = a.v_strides = ops::packed_bshd(skv, h, d);
    q.assign(size_t(b) * sq * h * d, 0.f);
    k.assign(size_t(b) * skv * h * d, 0.f);
    v.assign(size_t(b) * skv * h * d, 0.f);
    o.assign(q.size(), NAN);
    lse.assign(size_t(b) * h * sq, NAN);
  }
  float& at(std::vector<float>& t, const ops::BSHDStrides& s, int b, int i, int h, int d) {
    return t[b * s.b + i * s.s + h * s.h + d];
  }
  void run() { ops::attention_reference_host(a, q.data(), k.data(), v.data(), o.data(), lse.data()); }
};

}  // namespace

TEST(AttentionHostReference, UniformScoresAverageV) {
  HostProblem p(1, 2, 3, 4, 64, false);  // q = 0: every score 0, O = mean of V, LSE = ln(kv_len)
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int d = 0; d < 64; ++d) p.at(p.v, p.a.v_strides, 0, j, h, d) = float(j + 10 * h + d);
  p.run();
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 3; ++i) {
      for (int d = 0; d < 64; ++d) EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, i, h, d), 1.5f + 10 * h + d, 1e-5);
      EXPECT_NEAR(p.lse[h * 3 + i], std::log(4.0), 1e-6);
    }
}

TEST(AttentionHostReference, OneDominantKeyAndCausalRows) {
  HostProblem p(1, 1, 3, 3, 64, true);
  // k_j = e_j * 100, q_i = e_i: with scale 1, score(i, j) = 100 if i == j else 0.
  p.a.softmax_scale = 1.f;
  for (int j = 0; j < 3; ++j) {
    p.at(p.k, p.a.k_strides, 0, j, 0, j) = 100.f;
    p.at(p.q, p.a.q_strides, 0, j, 0, j) = 1.f;
    for (int d = 0; d < 64; ++d) p.at(p.v, p.a.v_strides, 0, j, 0, d) = float(100 * j + d);
  }
  p.run();
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 64; ++d) EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, i, 0, d), float(100 * i + d), 1e-3);
  // Row 0 (causal) sees key 0 only: LSE = its score exactly.
  EXPECT_NEAR(p.lse[0], 100.0, 1e-6);
  // Row 1 sees scores {0, 100}: LSE = 100 + ln(1 + e^-100).
  EXPECT_NEAR(p.lse[1], 100.0, 1e-6);
}

TEST(AttentionHostReference, CausalIsTopLeftAligned) {
  HostProblem p(1, 1, 4, 2, 64, true);  // q_len > kv_len: rows 1..3 see both keys, row 0 only key 0
  for (int d = 0; d < 64; ++d) {
    p.at(p.v, p.a.v_strides, 0, 0, 0, d) = 1.f;
    p.at(p.v, p.a.v_strides, 0, 1, 0, d) = 3.f;
  }
  p.run();
  EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, 0, 0, 5), 1.f, 1e-6);
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, i, 0, 5), 2.f, 1e-6);
}

TEST(AttentionHostReference, StridedLayoutGivesTheSameResult) {
  // The same numbers once dense and once inside a padded, head-major buffer.
  const int b = 2, h = 2, s = 5, d = 64;
  HostProblem dense(b, h, s, s, d, false);
  uint32_t x = 12345;
  auto rnd = [&x] {
    x = x * 1664525u + 1013904223u;
    return float((x >> 8) & 0xFFFF) / 65536.f - 0.5f;
  };
  for (auto* t : {&dense.q, &dense.k, &dense.v})
    for (float& f : *t) f = rnd();
  dense.run();

  HostProblem strided(b, h, s, s, d, false);
  ops::BSHDStrides st;  // [B, H, S+1, D+8] with the row padded: h-stride before s-stride
  st.s = d + 8;
  st.h = int64_t(s + 1) * st.s;
  st.b = int64_t(h) * st.h;
  strided.a.q_strides = strided.a.k_strides = strided.a.v_strides = strided.a.o_strides = st;
  const size_t n = size_t(b) * st.b;
  strided.q.assign(n, 0.f);
  strided.k.assign(n, 0.f);
  strided.v.assign(n, 0.f);
  strided.o.assign(n, NAN);
  for (int bb = 0; bb < b; ++bb)
    for (int i = 0; i < s; ++i)
      for (int hh = 0; hh < h; ++hh)
        for (int dd = 0; dd < d; ++dd) {
          strided.at(strided.q, st, bb, i, hh, dd) = dense.at(dense.q, dense.a.q_strides, bb, i, hh, dd);
          strided.at(strided.k, st, bb, i, hh, dd) = dense.at(dense.k, dense.a.k_strides, bb, i, hh, dd);
          strided.at(strided.v, st, bb, i, hh, dd) = dense.at(dense.v, dense.a.v_strides, bb, i, hh, dd);
        }
  strided.run();
  for (int bb = 0; bb < b; ++bb)
    for (int i = 0; i < s; ++i)
      for (int hh = 0; hh < h; ++hh)
        for (int dd = 0; dd < d; ++dd)
          EXPECT_FLOAT_EQ(strided.at(strided.o, st, bb, i, hh, dd), dense.at(dense.o, dense.a.o_strides, bb, i, hh, dd));
  EXPECT_EQ(strided.lse, dense.lse);
}

// Bottom-right causal (query i sees keys j <= i + kv_len - q_len) on hand-made problems: q = 0,
// so every visible key has score 0 and O is the mean of the visible values, LSE ln(#visible).
TEST(AttentionHostReference, BottomRightSeesTheLastKeys) {
  HostProblem p(1, 1, 2, 5, 64, true);  // rows see keys 0..3 and 0..4
  p.a.causal_align = causal::Align::bottom_right;
  for (int j = 0; j < 5; ++j)
    for (int d = 0; d < 64; ++d) p.at(p.v, p.a.v_strides, 0, j, 0, d) = float(10 * j + d);
  p.run();
  for (int d = 0; d < 64; ++d) {
    EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, 0, 0, d), 15.f + d, 1e-5);  // mean of 0, 10, 20, 30
    EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, 1, 0, d), 20.f + d, 1e-5);  // mean of 0 .. 40
  }
  EXPECT_NEAR(p.lse[0], std::log(4.0), 1e-6);
  EXPECT_NEAR(p.lse[1], std::log(5.0), 1e-6);
  // Top-left on the same inputs: rows see keys 0 and 0..1.
  p.a.causal_align = causal::Align::top_left;
  p.run();
  EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, 0, 0, 7), 7.f, 1e-5);
  EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, 1, 0, 7), 12.f, 1e-5);
}

TEST(AttentionHostReference, BottomRightEqualsTopLeftWhenLengthsMatch) {
  HostProblem a(2, 2, 6, 6, 64, true), b(2, 2, 6, 6, 64, true);
  b.a.causal_align = causal::Align::bottom_right;
  uint32_t x = 777;
  for (auto* t : {&a.q, &a.k, &a.v})
    for (float& f : *t) {
      x = x * 1664525u + 1013904223u;
      f = float((x >> 8) & 0xFFFF) / 65536.f - 0.5f;
    }
  b.q = a.q;
  b.k = a.k;
  b.v = a.v;
  a.run();
  b.run();
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
}

// One dominant key per row under bottom-right: row i's own key is i + (kv_len - q_len).
TEST(AttentionHostReference, BottomRightDiagonalIsShifted) {
  HostProblem p(1, 1, 3, 7, 64, true);  // offset 4: row i sees keys 0 .. i + 4
  p.a.causal_align = causal::Align::bottom_right;
  p.a.softmax_scale = 1.f;
  for (int i = 0; i < 3; ++i) p.at(p.q, p.a.q_strides, 0, i, 0, i) = 1.f;
  for (int j = 0; j < 7; ++j) {
    if (j >= 4) p.at(p.k, p.a.k_strides, 0, j, 0, j - 4) = 100.f;  // key j matches row j - 4
    for (int d = 0; d < 64; ++d) p.at(p.v, p.a.v_strides, 0, j, 0, d) = float(100 * j + d);
  }
  p.run();  // top-left would give row 0 key 0 only
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p.at(p.o, p.a.o_strides, 0, i, 0, 3), float(100 * (i + 4) + 3), 1e-2);
}

TEST(AttentionValidate, CausalOptions) {
  AttentionArgs a = good_args();  // q_len 77, kv_len 100
  a.causal = true;
  a.causal_align = causal::Align::bottom_right;
  a.causal_order = causal::TileOrder::longest_first;
  EXPECT_NO_THROW(ops::validate(a));
  EXPECT_EQ(ops::causal_key_offset(a), 23);
  expect_invalid(
      [](AttentionArgs& x) {
        x.causal = true;
        x.causal_align = causal::Align::bottom_right;
        x.q_len = 101;
        x.q_strides = x.o_strides = ops::packed_bshd(101, x.heads, x.head_dim);
      },
      "without a visible key");
  expect_invalid([](AttentionArgs& x) { x.causal_align = causal::Align::bottom_right; }, "needs a causal call");
  expect_invalid([](AttentionArgs& x) { x.causal_align = static_cast<causal::Align>(5); }, "causal alignment");
  expect_invalid([](AttentionArgs& x) { x.causal_order = static_cast<causal::TileOrder>(5); }, "tile order");
  expect_invalid([](AttentionArgs& x) { x.causal_group = -1; }, "causal group");
  expect_invalid([](AttentionArgs& x) { x.causal_group = x.heads * x.batch + 1; }, "causal group");
  expect_invalid(
      [](AttentionArgs& x) {
        x.causal = true;
        x.causal_order = causal::TileOrder::head_major;
        x.causal_group = 1;
      },
      "needs the auto, grouped or claimed tile order");
  a.causal_order = causal::TileOrder::grouped;
  a.causal_group = 1;
  EXPECT_NO_THROW(ops::validate(a));
  a.causal_order = causal::TileOrder::claimed;  // claimed takes a group too, and not the 128-row tile
  EXPECT_NO_THROW(ops::validate(a));
  expect_invalid(
      [](AttentionArgs& x) {
        x.causal = true;
        x.causal_order = causal::TileOrder::claimed;
        x.tile_policy = ops::AttentionTilePolicy::rows128;
        x.head_dim = 64;
        x.q_strides = x.o_strides = ops::packed_bshd(x.q_len, x.heads, 64);
        x.k_strides = x.v_strides = ops::packed_bshd(x.kv_len, x.heads, 64);
      },
      "the claimed causal order runs the staged tiles");
  EXPECT_EQ(ops::parse_causal_order("claimed"), causal::TileOrder::claimed);
  EXPECT_STREQ(ops::causal_order_name(causal::TileOrder::claimed), "claimed");
  EXPECT_EQ(ops::parse_causal_order("grouped"), causal::TileOrder::grouped);
  EXPECT_STREQ(ops::causal_order_name(causal::TileOrder::grouped), "grouped");
  EXPECT_EQ(AttentionArgs{}.causal_order, causal::TileOrder::automatic);  // the default
  EXPECT_EQ(ops::parse_causal_order("auto"), causal::TileOrder::automatic);
  EXPECT_STREQ(ops::causal_order_name(causal::TileOrder::automatic), "auto");
  a.causal_order = causal::TileOrder::automatic;  // auto takes a group (it runs grouped or claimed)
  EXPECT_NO_THROW(ops::validate(a));
  EXPECT_EQ(ops::parse_causal_align("bottom-right"), causal::Align::bottom_right);
  EXPECT_EQ(ops::parse_causal_order("longest-first"), causal::TileOrder::longest_first);
  EXPECT_STREQ(ops::causal_order_name(causal::TileOrder::head_major), "head-major");
  EXPECT_STREQ(ops::causal_align_name(causal::Align::top_left), "top-left");
  EXPECT_THROW(ops::parse_causal_align("bottom"), InvalidArgument);
  EXPECT_THROW(ops::parse_causal_order("lpt"), InvalidArgument);
}

// The automatic policy's short-sequence rule (kernels/attention/tile_rules.hpp noncausal_d64_tile), with
// num_ctas = 132 so no GPU is read: the 128-row tile where its waves fill the grid better by more
// than its lower rate, the 192-row tile elsewhere; d = 128 calls never get it (causal calls:
// AutomaticCausalRows128ByBusiestCta). With the
// key split off, so that the split tile's rule (AutomaticSplitShortOfAWave) stays out of it.
TEST(AttentionDispatch, AutomaticRows128ByWaves) {
  namespace ka = xstage::kernels::attention;
  EXPECT_DOUBLE_EQ(ka::wave_efficiency(132, 132), 1.0);
  EXPECT_DOUBLE_EQ(ka::wave_efficiency(144, 132), 144.0 / 264.0);
  AttentionArgs a = good_args();
  a.head_dim = 64;
  a.num_ctas = 132;
  a.batch = 1;
  a.tail_split = false;
  struct Shape {
    int s, h;
    bool rows128;
  };
  // S = 1024, 24 heads: 144 tiles of 192 rows, whose 24 partial ones (64 rows: one of three
  // groups busy) pair up on 12 CTAs in the partial-tiles kernel, vs 192 of 128 rows (1.45 waves):
  // 192 rows (128 rows with partial_tiles off: 1.09 against 1.45 waves at 0.92, below).
  // S = 1024, 40 heads: 240 (0.91 of 2 waves) vs 320: 192 rows. S = 4096, 4 heads: 88 vs 128
  // tiles (0.67 vs 0.97 of a wave): 128 rows. S = 4096, 24 heads: 528 = 4 full waves: 192 rows.
  // S = 4096, 16 heads: 0.89 vs 0.97 of their waves (ratio 0.917 < 0.92): 128 rows.
  for (Shape sh : {Shape{1024, 24, false}, Shape{1024, 40, false}, Shape{4096, 4, true}, Shape{4096, 24, false},
                   Shape{2048, 16, true}, Shape{2500, 8, false}, Shape{65536, 12, false},
                   Shape{4096, 16, true}, Shape{4608, 40, true}, Shape{2048, 40, true}, Shape{4608, 12, true},
                   Shape{1100, 24, true}}) {
    a.q_len = a.kv_len = sh.s;
    a.heads = sh.h;
    a.causal = false;
    const std::string name = ops::select_instantiation(a).name;
    EXPECT_EQ(name.find("rows128") != std::string::npos, sh.rows128) << "S " << sh.s << " H " << sh.h << ": " << name;
  }
  a.causal = false;
  a.q_len = a.kv_len = 1024;
  a.heads = 24;
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d64_noncausal_partial");
  a.heads = 48;  // whole + two partial tiles on some CTAs: the 128-row tile (measured 0.95-0.97x with partial)
  EXPECT_NE(ops::select_instantiation(a).name.find("rows128"), std::string::npos);
  a.q_len = a.kv_len = 2500;
  a.heads = 40;  // 5 rounds with a 4-row tail (measured 1.06x the plain 192-row tile)
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d64_noncausal_partial");
  a.q_len = a.kv_len = 1024;
  a.heads = 24;
  a.partial_tiles = false;  // every tile whole, head-major: the waves decide
  EXPECT_NE(ops::select_instantiation(a).name.find("rows128"), std::string::npos) << "partial tiles off";
  a.partial_tiles = true;
  a.heads = 12;  // 72 tiles, one round: nothing to pair
  EXPECT_EQ(ops::select_instantiation(a).name.find("partial"), std::string::npos);
  a.heads = 24;
  a.tile_policy = ops::AttentionTilePolicy::partial;
  a.q_len = a.kv_len = 4096;
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d64_noncausal_partial") << "asked for";
  a.head_dim = 128;
  EXPECT_THROW(ops::select_instantiation(a), InvalidArgument);
  a.head_dim = 64;
  a.causal = true;
  EXPECT_THROW(ops::select_instantiation(a), InvalidArgument);
  a.causal = false;
  a.q_len = a.kv_len = 1024;
  a.tile_policy = ops::AttentionTilePolicy::staged;
  EXPECT_EQ(ops::select_instantiation(a).name.find("rows128"), std::string::npos) << "staged keeps 192 rows";
  a.tile_policy = ops::AttentionTilePolicy::automatic;
  a.head_dim = 128;
  EXPECT_EQ(ops::select_instantiation(a).name.find("rows128"), std::string::npos);
}

// Partial tiles (docs/attention.md §Partial tiles): where the partial-tiles kernel's order applies,
// and the busiest CTA the d = 64 rule weighs (whole tiles 1, one-group partial tiles
// partial_tile_cost, dealt last and serpentine).
TEST(AttentionDispatch, PartialTilesLastAndBusiestCta) {
  namespace ka = xstage::kernels::attention;
  EXPECT_TRUE(ka::partial_tiles_last(1024, 192, 144, 132));    // 64-row tail, 2 rounds
  EXPECT_TRUE(ka::partial_tiles_last(4096, 192, 528, 132));    // 4 rounds
  EXPECT_TRUE(ka::partial_tiles_last(1024, 192, 1056, 132));   // 8 rounds
  EXPECT_FALSE(ka::partial_tiles_last(1024, 192, 1057, 132));  // more than 8
  EXPECT_FALSE(ka::partial_tiles_last(1088, 192, 24, 10));     // 128-row tail: two groups busy
  EXPECT_FALSE(ka::partial_tiles_last(1100, 192, 144, 132));   // 140-row tail
  EXPECT_FALSE(ka::partial_tiles_last(1024, 128, 192, 132));   // no tail
  EXPECT_FALSE(ka::partial_tiles_last(1024, 192, 132, 132));   // one round
  EXPECT_FALSE(ka::partial_tiles_last(1050, 128, 90, 0));
  EXPECT_TRUE(ka::partial_tiles_pay(1024, 24, 132));
  EXPECT_FALSE(ka::partial_tiles_pay(1024, 12, 132));   // one round
  EXPECT_FALSE(ka::partial_tiles_pay(1024, 40, 132));   // some CTA keeps two whole tiles either way
  EXPECT_FALSE(ka::partial_tiles_pay(4096, 24, 132));
  EXPECT_TRUE(ka::partial_tiles_pay(1024, 48, 132));    // 2.28 against 3 whole tiles, but the 128-row
                                                         // tile's 3 rounds finish first
  EXPECT_EQ(ka::noncausal_d64_tile(1024, 1024, 48, 132), ka::NonCausalD64Tile::rows128);
  EXPECT_TRUE(ka::partial_tiles_pay(2500, 40, 132));    // 5 rounds, a 4-row tail
  EXPECT_EQ(ka::noncausal_d64_tile(2500, 2500, 40, 132), ka::NonCausalD64Tile::partial);
  EXPECT_EQ(ka::noncausal_d64_tile(2500, 2500, 40, 132, false), ka::NonCausalD64Tile::staged);
  // S 1024, 24 heads: 120 whole 192-row tiles and 24 partial ones, two of which share each of 12 CTAs.
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(1024, 192, 24, 132, true), std::max(1.0, 2 * ka::partial_tile_cost(1, 3)));
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(1024, 192, 24, 132, false), 2.0);
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(1024, 128, 24, 132, false), 2.0);
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(1024, 192, 24, 500, true), 1.0);   // one round
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(1100, 192, 24, 132, true), 2.0);   // the tail keeps every group
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(4096, 192, 16, 132, true), 3.0);   // 336 whole + 16 partial tiles
  EXPECT_DOUBLE_EQ(ka::noncausal_busiest(65536, 192, 40, 132, true), 104.0);  // beyond 8 rounds: the rounds
  EXPECT_DOUBLE_EQ(ka::partial_tile_cost(3, 3), 1.0);
  EXPECT_LT(ka::partial_tile_cost(1, 3), 1.0);
}

// The causal d = 64 rule (kernels/attention/tile_rules.hpp causal_d64_tile), num_ctas = 132: the tile
// whose modelled busiest CTA finishes first. S = 2048, 8 heads: 88 192-row tiles, the busiest CTA
// holds one tile of 16 key blocks + 1 (x 192 = 3264), or one 128-row tile of 16 + 1 (x 128 / 0.87 =
// 2501), or two 64-row key-group items, 8 + 1 and 1 + 1 steps of two groups (x 128 / 0.87 = 1618):
// key groups. S = 2048 with 16 heads: 128 rows (two 128-row tiles against three key-group items of
// 8 + 1, 2 + 1 and ...). S = 32768 with 8 heads (1368 tiles, > 4 waves) and S = 8192 with 40 heads
// keep 192 rows without the walk; the model itself is checked against hand counts in
// test_attention_tile_order.
TEST(AttentionDispatch, AutomaticCausalD64TileByBusiestCta) {
  if (!xstage::kernels::attention::kKeyGroupsBuilt) GTEST_SKIP() << "no key-group kernels in this build (XSTAGE_ATTN_INTRA_WG_OVERLAP=OFF)";
  namespace ka = xstage::kernels::attention;
  using T = ka::CausalD64Tile;
  AttentionArgs a = good_args();
  a.head_dim = 64;
  a.num_ctas = 132;
  a.batch = 1;
  a.causal = true;
  a.q_len = a.kv_len = 2048;
  a.heads = 8;
  for (auto o : {causal::TileOrder::grouped, causal::TileOrder::longest_first}) {
    a.causal_order = o;
    EXPECT_NE(ops::select_instantiation(a).name.find("_causal_rows64"), std::string::npos) << static_cast<int>(o);
  }
  a.causal_order = causal::TileOrder::grouped;
  EXPECT_DOUBLE_EQ(ka::causal_key_groups_busiest(2048, 2048, 0, 8, 132, causal::TileOrder::grouped),
                   8 + ka::kKeyGroupItemCost + 1 + ka::kKeyGroupItemCost);
  EXPECT_EQ(ka::causal_d64_tile(2048, 2048, 0, 8, 132, causal::TileOrder::grouped), T::rows64);
  EXPECT_EQ(ka::causal_d64_tile(2048, 2048, 0, 16, 132, causal::TileOrder::grouped), T::rows128);
  EXPECT_EQ(ka::causal_d64_tile(32768, 32768, 0, 8, 132, causal::TileOrder::grouped), T::staged);
  EXPECT_EQ(ka::causal_d64_tile(8192, 8192, 0, 40, 132, causal::TileOrder::grouped), T::staged);
  a.heads = 16;
  EXPECT_NE(ops::select_instantiation(a).name.find("_causal_rows128"), std::string::npos);
  a.heads = 8;
  a.tile_policy = ops::AttentionTilePolicy::staged;
  EXPECT_EQ(ops::select_instantiation(a).name, "bf16_d64_causal") << "staged keeps 192 rows";
  a.tile_policy = ops::AttentionTilePolicy::automatic;
  a.head_dim = 128;
  EXPECT_EQ(ops::select_instantiation(a).name.find("rows"), std::string::npos);
}

// The automatic causal order (ops::causal_order_for, docs/attention.md §Persistent scheduler
// "auto"), num_ctas = 132 so no GPU is read: claimed on long d = 128 shapes, grouped elsewhere,
// never claimed where the 128-row causal tile runs (tile policy rows128, or d = 64's automatic rule).
TEST(AttentionDispatch, AutoCausalOrder) {
  AttentionArgs a = good_args();
  a.num_ctas = 132;
  a.batch = 1;
  a.causal = true;
  a.causal_order = causal::TileOrder::automatic;
  auto shape = [&](int d, int s, int h) {
    a.head_dim = d;
    a.heads = h;
    a.q_len = a.kv_len = s;
    a.q_strides = a.o_strides = ops::packed_bshd(s, h, d);
    a.k_strides = a.v_strides = ops::packed_bshd(s, h, d);
  };
  shape(128, 16384, 24);
  EXPECT_EQ(ops::causal_order_for(a), causal::TileOrder::claimed);
  EXPECT_EQ(ops::causal_group_for(a), 1);  // claimed's plan: one head per group at S = 16384
  shape(128, 2048, 8);
  EXPECT_EQ(ops::causal_order_for(a), causal::TileOrder::grouped);
  shape(64, 2048, 8);  // the key-groups tile's shape (AutomaticCausalD64TileByBusiestCta)
  EXPECT_EQ(ops::causal_order_for(a), causal::TileOrder::grouped);
  EXPECT_NE(ops::select_instantiation(a).name.find(xstage::kernels::attention::kKeyGroupsBuilt ? "_causal_rows64"
                                                                                               : "_causal_rows128"),
            std::string::npos);
  a.causal_order = causal::TileOrder::grouped;  // an explicit order stays
  shape(128, 16384, 24);
  EXPECT_EQ(ops::causal_order_for(a), causal::TileOrder::grouped);
  a.causal_order = causal::TileOrder::automatic;
  a.causal = false;  // non-causal calls ignore the order
  EXPECT_EQ(ops::causal_group_for(a), 0);
}

// The key-split plan (kernels/attention/split_plan.hpp): the last wave's tiles when they leave
// most slots idle, every tile when the launch is short of a wave, nothing otherwise.
TEST(AttentionSplitPlan, TailAndShortOfAWave) {
  namespace ka = xstage::kernels::attention;
  struct Case {
    long long tiles;
    int slots, kv_blocks, capacity;
    int full, splits;
  };
  for (Case c : {
           Case{192, 132, 8, 132, 132, 2},   // S 1024, 24 heads, d 128: 60 left, 2 parts each
           Case{144, 132, 9, 132, 132, 4},   // 12 left: 4 parts (kMaxTailSplit)
           Case{144, 132, 2, 132, 132, 2},   // ... but no more parts than key blocks
           Case{264, 132, 8, 132, 264, 1},   // whole waves
           Case{200, 132, 8, 132, 200, 1},   // 68 left: more than half a wave
           Case{64, 132, 16, 132, 0, 2},     // S 2048, 4 heads: every tile in 2 parts of 8 key blocks
           Case{16, 132, 64, 132, 0, 8},     // 16 tiles of 8192 keys: 8 parts (kMaxFillSplit)
           Case{32, 132, 32, 132, 0, 4},     // 4 parts of 8 key blocks
           Case{32, 132, 24, 132, 0, 3},     // at least kMinFillPartBlocks per part
           Case{32, 132, 15, 132, 32, 1},    // 15 key blocks: no split
           Case{32, 132, 8, 132, 32, 1},     // S 1024: no split
           Case{100, 132, 64, 132, 100, 1},  // short of a wave, but under 2 parts per tile
           Case{32, 132, 32, 131, 32, 1},    // workspace smaller than the slots
           Case{32, 0, 32, 132, 32, 1}}) {   // no slots
    const ka::TailSplitPlan p = ka::tail_split_plan(c.tiles, c.slots, c.kv_blocks, c.capacity);
    EXPECT_EQ(p.full, c.full) << c.tiles << " tiles, " << c.slots << " slots, " << c.kv_blocks << " key blocks";
    EXPECT_EQ(p.splits, c.splits) << c.tiles << " tiles, " << c.slots << " slots, " << c.kv_blocks << " key blocks";
    EXPECT_LE(ka::split_work_items(c.tiles, p), c.tiles <= c.slots ? c.slots : c.tiles + c.slots);
  }
}

// The automatic policy's split rule (tile_rules.hpp split_wins): non-causal launches short of a wave
// with parts of at least 8 key blocks, both head dims, and d = 128 launches whose last wave splits
// with at least 16 key blocks get the split tile (d = 128 from 8192 keys keeps the long-key tile,
// whose epilogue splits too); causal calls, the key split off and other launches do not.
TEST(AttentionDispatch, AutomaticSplitShortOfAWave) {
  const bool kg = xstage::kernels::attention::kKeyGroupsBuilt;  // key groups take 2-part splits' launches
  AttentionArgs a = good_args();
  a.num_ctas = 132;
  a.batch = 1;
  struct Shape {
    int s, h;
    bool split64, split128;
  };
  for (int d : {64, 128}) {
    a.head_dim = d;
    // 128-row tiles on 132 slots: S 2048 with 4 heads 64 tiles of 16 key blocks (2 parts each);
    // S 1024 with 4 heads 32 tiles of 8 key blocks (parts too short; the key-group tile runs there
    // and, over a 2-part split, at S 2048 with 4 heads and d = 64 S 8192 with 1 head:
    // NonCausalD128KeyGroupsOnOneRoundLaunches); S 4096 with 4 heads 128
    // tiles: nearly a wave. Last waves: S 4608 with 4 heads (144 tiles, 12 left, 36 key blocks),
    // S 2500 with 8 (160, 28 left, 20 blocks), with 16 (320, 56 left); S 1024 with 24 heads (60
    // left of 8 key blocks): no; S 4608 with 24 heads (72 left): no.
    for (Shape sh : {Shape{4096, 4, false, false}, Shape{4096, 8, false, false}, Shape{1024, 4, false, false},
                     Shape{2048, 4, !kg, !kg}, Shape{1024, 8, false, false}, Shape{1100, 4, false, false},
                     Shape{1024, 16, false, false}, Shape{1024, 24, false, false}, Shape{4608, 24, false, false},
                     Shape{300, 4, false, false}, Shape{8192, 1, !kg, true}, Shape{4608, 4, false, true},
                     Shape{2500, 8, false, true}, Shape{2500, 16, false, true}, Shape{1024, 40, false, false}}) {
      a.q_len = a.kv_len = sh.s;
      a.heads = sh.h;
      a.causal = false;
      a.tail_split = true;
      const std::string name = ops::select_instantiation(a).name;
      // d = 128 from 8192 keys: the long-key tile, which splits the same way.
      const bool long_kv = d == 128 && sh.s >= 8192;
      EXPECT_EQ(name.find("longkv") != std::string::npos, long_kv) << name;
      const bool split = d == 64 ? sh.split64 : sh.split128;
      EXPECT_EQ(name.find("_split") != std::string::npos, split && !long_kv) << "d " << d << " S " << sh.s << " H " << sh.h << ": " << name;
      a.tail_split = false;
      EXPECT_EQ(ops::select_instantiation(a).name.find("_split"), std::string::npos) << "the split off";
      a.tail_split = true;
      a.causal = true;
      EXPECT_EQ(ops::select_instantiation(a).name.find("_split"), std::string::npos) << "causal";
    }
  }
}

// AttentionTilePolicy::long_kv: the 128 x 192 tile for non-causal d = 128 at any key count
// (the Ulysses harness runs it at short test shapes too); other calls are one-line refusals.
TEST(AttentionTiles, LongKvPolicyForcesTheLongKeyTile) {
  AttentionArgs a = good_args();
  a.tile_policy = ops::AttentionTilePolicy::long_kv;
  a.head_dim = 128;
  a.causal = false;
  for (int s : {300, 1024, 8192}) {
    a.q_len = a.kv_len = s;
    EXPECT_NE(ops::select_instantiation(a).name.find("longkv"), std::string::npos) << "S " << s;
  }
  a.head_dim = 64;
  EXPECT_THROW(ops::select_instantiation(a), InvalidArgument);
  a.head_dim = 128;
  a.causal = true;
  EXPECT_THROW(ops::select_instantiation(a), InvalidArgument);
}

TEST(AttentionFlops, CountsBottomRightPairs) {
  AttentionArgs a = good_args();
  a.batch = 1;
  a.heads = 1;
  a.head_dim = 64;
  a.causal = true;
  a.causal_align = causal::Align::bottom_right;
  a.q_len = 2;
  a.kv_len = 5;  // rows see 4 and 5 keys
  EXPECT_DOUBLE_EQ(ops::attention_flops(a), 4.0 * 64 * 9);
  a.q_len = a.kv_len = 4096;  // same as top-left
  EXPECT_DOUBLE_EQ(ops::attention_flops(a), 4.0 * 64 * (4096.0 * 4097.0 / 2));
}

#endif  // XSTAGE_HAVE_ATTENTION
