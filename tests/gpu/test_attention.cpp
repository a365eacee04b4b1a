// The Hopper attention kernel against a naive fp32 reference on fresh random inputs.
// Outputs are poisoned (0xFFFF, a NaN in bf16 and fp16) before every run: rows < q_len must
// come back finite and within ||out - ref|| / ||ref|| < 1e-2 over the whole output AND row by
// row (every (batch, query, head) row within the benches' per-row tolerance,
// gputest::kAttentionRowTolerance: one wrong row fails), padding rows >= q_len must keep the
// poison, and the LSE must match. Tests check results, not which tile the operator picks (the
// dispatch rules are tests/cpu/test_attention_cpu.cpp's). Needs one Hopper GPU (sm_90); skips
// otherwise.
#ifdef XSTAGE_HAVE_ATTENTION
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cli/bench_check.hpp"
#include "gpu/attention_reference.hpp"
#include "gpu/gpu_env.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/attention.hpp"

using namespace xstage;
using ops::AttentionDType;

namespace {

#define XS_TEST_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

std::string missing_hopper() {
  std::string why = gputest::missing_gpus(1);
  if (!why.empty()) return why;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0)
    return "needs an sm_90 (Hopper) GPU, found sm_" + std::to_string(major * 10 + minor);
  return {};
}

#define XS_REQUIRE_HOPPER()                       \
  do {                                            \
    XS_REQUIRE_GPUS(1);                           \
    std::string why_h_ = missing_hopper();        \
    if (!why_h_.empty()) GTEST_SKIP() << why_h_;  \
  } while (0)

enum class Layout { dense, packed_qkv };

struct Case {
  std::string name;
  AttentionDType dtype;
  int d;
  bool causal;
  int batch, heads, q_len, kv_len;
  Layout layout = Layout::dense;
  float scale = 0.f;      // 0: 1/sqrt(d)
  float amplitude = 1.f;  // q, k in [-amp, amp); v in [-1, 1)
  int num_ctas = 0;
  ops::AttentionTilePolicy policy = ops::AttentionTilePolicy::automatic;
  bool tail_split = true;
  causal::Align align = causal::Align::top_left;             // causal only
  causal::TileOrder order = causal::TileOrder::head_major;  // causal only
  int group = 0;                                            // grouped order: pairs per group (0: planned)
  // > 0: batch 0's first key block (the one the kernel processes last) drawn in [-amp, amp)
  // instead: its scores lie far above every earlier block's, so the lazy reference must rise
  // at the end (and with a large amp the exponent against the old reference overflows).
  float key_block0_amplitude = 0.f;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p) cudaFree(p);
      p = o.p;
      o.p = nullptr;
    }
    return *this;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

uint64_t seed_of(const std::string& name, int which) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the case name: fixed per case, different between cases
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(which + 1);
}

// Every row of the output within the per-row tolerance (attention_reference.hpp).
void expect_rows_ok(const gputest::OutputCheck& oc, const std::string& what) {
  EXPECT_GT(oc.rows_checked, 0) << what << ": no rows compared";
  EXPECT_EQ(oc.rows_failed, 0) << what << ": " << oc.rows_failed << " of " << oc.rows_checked
                               << " rows out of the per-row tolerance (first: batch " << oc.first_failed_b << ", query "
                               << oc.first_failed_s << ", head " << oc.first_failed_h << "; worst row rel error "
                               << oc.worst_row_rel << ")";
}

class AttentionGpu : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionGpu, MatchesReference) {
  XS_REQUIRE_HOPPER();
  const Case& c = GetParam();
  if (c.policy == ops::AttentionTilePolicy::rows64) {
    try {
      ops::select_instantiation(c.dtype, c.d, c.causal, c.kv_len, c.policy);
    } catch (const InvalidArgument& e) {
      GTEST_SKIP() << e.what();  // a build without the key-group kernels (XSTAGE_ATTN_INTRA_WG_OVERLAP=OFF)
    }
  }
  cudaStream_t s = nullptr;
  XS_TEST_CUDA(cudaStreamCreate(&s));

  ops::AttentionArgs a;
  a.dtype = c.dtype;
  a.batch = c.batch;
  a.heads = c.heads;
  a.q_len = c.q_len;
  a.kv_len = c.kv_len;
  a.head_dim = c.d;
  a.causal = c.causal;
  a.softmax_scale = c.scale;
  a.num_ctas = c.num_ctas;
  a.tile_policy = c.policy;
  a.tail_split = c.tail_split;
  a.causal_align = c.align;
  a.causal_order = c.order;
  a.causal_group = c.group;

  // Inputs. packed_qkv: one [B, S, 3, H, D] tensor (S = q_len = kv_len), Q/K/V are slices.
  const size_t e = 2;  // bytes per element
  DeviceBuffer qkv, qb, kb, vb;
  if (c.layout == Layout::packed_qkv) {
    ASSERT_EQ(c.q_len, c.kv_len);
    const size_t n = size_t(c.batch) * c.q_len * 3 * c.heads * c.d;
    qkv = DeviceBuffer(n * e);
    ASSERT_NE(qkv.p, nullptr);
    gputest::fill_random_16bit(qkv.p, n, c.dtype, seed_of(c.name, 0), c.amplitude, s);
    ops::BSHDStrides st;
    st.d = 1;
    st.h = c.d;
    st.s = int64_t(3) * c.heads * c.d;
    st.b = int64_t(c.q_len) * st.s;
    a.q_strides = a.k_strides = a.v_strides = st;
    const int64_t plane = int64_t(c.heads) * c.d;
    a.q = qkv.as<uint16_t>();
    a.k = qkv.as<uint16_t>() + plane;
    a.v = qkv.as<uint16_t>() + 2 * plane;
  } else {
    const size_t nq = size_t(c.batch) * c.q_len * c.heads * c.d;
    const size_t nkv = size_t(c.batch) * c.kv_len * c.heads * c.d;
    qb = DeviceBuffer(nq * e);
    kb = DeviceBuffer(nkv * e);
    vb = DeviceBuffer(nkv * e);
    ASSERT_TRUE(qb.p && kb.p && vb.p);
    gputest::fill_random_16bit(qb.p, nq, c.dtype, seed_of(c.name, 0), c.amplitude, s);
    gputest::fill_random_16bit(kb.p, nkv, c.dtype, seed_of(c.name, 1), c.amplitude, s);
    if (c.key_block0_amplitude > 0.f)
      gputest::fill_random_16bit(kb.p, size_t(std::min(c.kv_len, 128)) * c.heads * c.d, c.dtype, seed_of(c.name, 3),
                                 c.key_block0_amplitude, s);
    gputest::fill_random_16bit(vb.p, nkv, c.dtype, seed_of(c.name, 2), 1.f, s);
    a.q = qb.p;
    a.k = kb.p;
    a.v = vb.p;
    a.q_strides = ops::packed_bshd(c.q_len, c.heads, c.d);
    a.k_strides = a.v_strides = ops::packed_bshd(c.kv_len, c.heads, c.d);
  }

  // Output with padding rows, poisoned. LSE poisoned too.
  const int s_alloc = c.q_len + 37;
  const size_t no = size_t(c.batch) * s_alloc * c.heads * c.d;
  DeviceBuffer ob(no * e);
  const size_t nl = size_t(c.batch) * c.heads * c.q_len;
  DeviceBuffer lse(nl * sizeof(float)), lse_ref(nl * sizeof(float));
  DeviceBuffer o_ref(size_t(c.batch) * c.q_len * c.heads * c.d * sizeof(float));
  ASSERT_TRUE(ob.p && lse.p && lse_ref.p && o_ref.p);
  XS_TEST_CUDA(cudaMemsetAsync(ob.p, 0xFF, no * e, s));
  XS_TEST_CUDA(cudaMemsetAsync(lse.p, 0xFF, nl * sizeof(float), s));
  a.o = ob.p;
  a.o_strides = ops::packed_bshd(s_alloc, c.heads, c.d);
  a.return_lse = true;
  a.lse = lse.as<float>();

  gputest::reference_attention(a, o_ref.as<float>(), lse_ref.as<float>(), s);
  ASSERT_NO_THROW(ops::attention_forward(a, s));
  XS_TEST_CUDA(cudaStreamSynchronize(s));
  XS_TEST_CUDA(cudaGetLastError());

  const gputest::OutputCheck oc = gputest::check_output(a, s_alloc, o_ref.as<float>(), s);
  EXPECT_EQ(oc.nan_valid, 0u) << "non-finite outputs in rows < q_len";
  EXPECT_EQ(oc.touched, 0u) << "padding rows >= q_len were written";
  EXPECT_GT(oc.ref_sq, 0.0);
  EXPECT_LT(oc.rel(), 1e-2) << "relative error " << oc.rel();
  expect_rows_ok(oc, c.name);
  const gputest::LseCheck lc = gputest::check_lse(a, lse.as<float>(), lse_ref.as<float>(), s);
  EXPECT_EQ(lc.nan_valid, 0u) << "non-finite LSE values";
  EXPECT_LT(lc.max_abs_err, 1e-2) << "LSE error " << lc.max_abs_err;
  RecordProperty("rel_error", std::to_string(oc.rel()));
  std::printf("[ %s ] rel error %.3e, worst row %.3e (%lld rows), lse error %.3e\n", c.name.c_str(), oc.rel(),
              oc.worst_row_rel, oc.rows_checked, lc.max_abs_err);
  cudaStreamDestroy(s);
}

// Causal tile order longest_first and bottom-right alignment (docs/attention.md §Causal):
// both dtypes and head dims, lengths off the 128/192 grid, q != kv both ways (bottom-right only
// with q <= kv), batch 2, few CTAs (the serpentine deal wraps many rounds), peaked scores,
// packed inputs, the rows128 tile, and the decoding-style single query.
void causal_cases(std::vector<Case>& v) {
  const AttentionDType bf = AttentionDType::bf16, fp = AttentionDType::fp16;
  const auto lpt = causal::TileOrder::longest_first, heads = causal::TileOrder::head_major;
  const auto cl = causal::TileOrder::claimed;
  const auto tl = causal::Align::top_left, br = causal::Align::bottom_right;
  const auto rows128 = ops::AttentionTilePolicy::rows128;
  const Layout dense = Layout::dense;
  auto add = [&](std::string name, AttentionDType t, int d, int b, int h, int sq, int skv, causal::Align al,
                 causal::TileOrder o, int ctas = 0, float scale = 0.f, float amp = 1.f, Layout lay = Layout::dense,
                 ops::AttentionTilePolicy pol = ops::AttentionTilePolicy::automatic) {
    Case c{std::move(name), t, d, true, b, h, sq, skv, lay, scale, amp, ctas, pol};
    c.align = al;
    c.order = o;
    v.push_back(c);
  };
  // Longest-first, top-left.
  for (AttentionDType t : {bf, fp})
    for (int d : {64, 128})
      add(std::string("lpt_s77_") + (t == bf ? "bf16" : "fp16") + "_d" + std::to_string(d), t, d, 2, 3, 77, 77, tl, lpt);
  add("lpt_s4680_bf16_d128_h3", bf, 128, 1, 3, 4680, 4680, tl, lpt);
  add("lpt_s4680_fp16_d64_h4", fp, 64, 1, 4, 4680, 4680, tl, lpt);
  add("lpt_q1000_kv1333_bf16_d128_b2", bf, 128, 2, 3, 1000, 1333, tl, lpt);
  add("lpt_q1333_kv1000_fp16_d64_b2", fp, 64, 2, 3, 1333, 1000, tl, lpt);
  add("lpt_ctas5_bf16_d128", bf, 128, 1, 4, 2000, 2000, tl, lpt, 5);
  add("lpt_ctas7_fp16_d64_b2", fp, 64, 2, 3, 1000, 777, tl, lpt, 7);
  add("lpt_peaked_fp16_d64", fp, 64, 1, 4, 1333, 1333, tl, lpt, 0, 1.0f, 2.5f);
  add("lpt_packed_qkv_bf16_d128", bf, 128, 2, 3, 1000, 1000, tl, lpt, 0, 0.f, 1.f, Layout::packed_qkv);
  add("lpt_s4680_bf16_d64_h4_rows128", bf, 64, 1, 4, 4680, 4680, tl, lpt, 0, 0.f, 1.f, dense, rows128);
  // Claimed (the counter hands out positions; few CTAs make it claim many times).
  add("cl_s4680_bf16_d128_h3", bf, 128, 1, 3, 4680, 4680, tl, cl);
  add("cl_q1333_kv1000_fp16_d64_b2", fp, 64, 2, 3, 1333, 1000, tl, cl);
  add("cl_ctas5_fp16_d128", fp, 128, 1, 4, 2000, 2000, tl, cl, 5);
  add("cl_ctas7_bf16_d64_b2", bf, 64, 2, 3, 1000, 777, tl, cl, 7);
  add("cl_s77_bf16_d64", bf, 64, 2, 3, 77, 77, tl, cl);
  add("br_q1000_kv1333_bf16_d128_b2_cl", bf, 128, 2, 3, 1000, 1333, br, cl);
  add("br_q300_kv4680_fp16_d64_cl", fp, 64, 1, 4, 300, 4680, br, cl);
  // Auto (the default order): a long d = 128 shape it runs claimed, short d = 64 ones it runs grouped
  // (AttentionDispatch.AutoCausalOrder checks which).
  const auto au = causal::TileOrder::automatic;
  add("auto_s8300_bf16_d128_h2", bf, 128, 1, 2, 8300, 8300, tl, au);
  add("auto_s2000_fp16_d64_h3", fp, 64, 1, 3, 2000, 2000, tl, au);
  add("auto_q1000_kv1333_bf16_d128_b2_br", bf, 128, 2, 3, 1000, 1333, br, au);
  // Bottom-right, head-major and longest-first.
  add("br_q1000_kv1333_bf16_d128_b2", bf, 128, 2, 3, 1000, 1333, br, heads);
  add("br_q1000_kv1333_fp16_d128_b2_lpt", fp, 128, 2, 3, 1000, 1333, br, lpt);
  add("br_q300_kv4680_bf16_d64", bf, 64, 1, 4, 300, 4680, br, heads);
  add("br_q300_kv4680_fp16_d64_ctas7_lpt", fp, 64, 1, 4, 300, 4680, br, lpt, 7);
  add("br_q129_kv4000_bf16_d128_b2_lpt", bf, 128, 2, 2, 129, 4000, br, lpt);
  add("br_q77_kv200_fp16_d64", fp, 64, 2, 3, 77, 200, br, heads);
  add("br_q1_kv777_bf16_d128", bf, 128, 2, 3, 1, 777, br, heads);
  add("br_q1_kv777_fp16_d64_lpt", fp, 64, 2, 3, 1, 777, br, lpt);
  add("br_s1000_bf16_d64_lpt", bf, 64, 2, 3, 1000, 1000, br, lpt);
  add("br_peaked_fp16_d128_q700_kv1500", fp, 128, 1, 2, 700, 1500, br, lpt, 0, 1.0f, 2.5f);
  add("br_packed_qkv_fp16_d64", fp, 64, 2, 3, 1000, 1000, br, heads, 0, 0.f, 1.f, Layout::packed_qkv);
  add("br_q500_kv1333_fp16_d64_rows128_lpt", fp, 64, 2, 3, 500, 1333, br, lpt, 0, 0.f, 1.f, dense, rows128);
  add("br_q500_kv1333_bf16_d64_rows128_ctas5", bf, 64, 1, 3, 500, 1333, br, heads, 5, 0.f, 1.f, dense, rows128);
  // Key groups (tile policy rows64, docs/attention.md §Key groups): one-block tiles (group 1 has
  // none), odd and even block counts, q != kv both alignments, the single query, few CTAs (the
  // merge buffer reused over many tiles), head-major and grouped orders, batch 2, packed inputs,
  // peaked scores, and the shape it was built for.
  const auto r64 = ops::AttentionTilePolicy::rows64;
  add("rows64_s77_bf16", bf, 64, 2, 3, 77, 77, tl, lpt, 0, 0.f, 1.f, dense, r64);
  add("rows64_s77_fp16_heads", fp, 64, 2, 3, 77, 77, tl, heads, 0, 0.f, 1.f, dense, r64);
  add("rows64_s4680_fp16_h4", fp, 64, 1, 4, 4680, 4680, tl, lpt, 0, 0.f, 1.f, dense, r64);
  add("rows64_q1333_kv1000_bf16_b2", bf, 64, 2, 3, 1333, 1000, tl, lpt, 0, 0.f, 1.f, dense, r64);
  add("rows64_br_q500_kv1333_fp16", fp, 64, 2, 3, 500, 1333, br, lpt, 0, 0.f, 1.f, dense, r64);
  add("rows64_br_q1_kv777_bf16", bf, 64, 2, 3, 1, 777, br, heads, 0, 0.f, 1.f, dense, r64);
  add("rows64_br_q300_kv4680_bf16_ctas5", bf, 64, 1, 4, 300, 4680, br, lpt, 5, 0.f, 1.f, dense, r64);
  add("rows64_ctas7_fp16_b2_heads", fp, 64, 2, 3, 1000, 777, tl, heads, 7, 0.f, 1.f, dense, r64);
  add("rows64_peaked_fp16", fp, 64, 1, 4, 1333, 1333, tl, lpt, 0, 1.0f, 2.5f, dense, r64);
  add("rows64_packed_qkv_bf16", bf, 64, 2, 3, 1000, 1000, tl, lpt, 0, 0.f, 1.f, Layout::packed_qkv, r64);
  // A one-block tile followed by a long one on the same CTA (head-major, 3 CTAs, 8 heads): with an odd
  // block count the next tile's stages would change group without the empty position.
  add("rows64_oneblock_then_long_fp16_ctas3", fp, 64, 1, 8, 1000, 1000, tl, heads, 3, 0.f, 1.f, dense, r64);
  add("rows64_s2048_bf16_h8_grouped", bf, 64, 1, 8, 2048, 2048, tl, causal::TileOrder::grouped, 0, 0.f, 1.f, dense, r64);
  // The automatic policy's causal 128-row choice (S = 2048 with 8 heads on a full H200: 128-row
  // tiles by the busiest-CTA model, kernels/attention/tile_rules.hpp causal_rows128_wins).
  add("auto_s2048_bf16_d64_causal_h8_grouped", bf, 64, 1, 8, 2048, 2048, tl, causal::TileOrder::grouped);
  // Grouped (longest-first within groups of (batch, head) pairs): groups that cross the batch
  // boundary, a partial last group, one pair per group, and the planner's choice.
  const auto grp = causal::TileOrder::grouped;
  auto add_grouped = [&](std::string name, AttentionDType t, int d, int b, int h, int sq, int skv, causal::Align al,
                         int group, int ctas) {
    add(std::move(name), t, d, b, h, sq, skv, al, grp, ctas);
    v.back().group = group;
  };
  add_grouped("grp2_b2h3_bf16_d128_ctas7", bf, 128, 2, 3, 1000, 1000, tl, 2, 7);
  add_grouped("grp4_b2h3_fp16_d64_ctas5", fp, 64, 2, 3, 1333, 1333, tl, 4, 5);
  add_grouped("grp1_h5_bf16_d64_br_q700_kv1500", bf, 64, 1, 5, 700, 1500, br, 1, 11);
  add_grouped("grp_planned_h6_fp16_d128_s4680", fp, 128, 1, 6, 4680, 4680, tl, 0, 0);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const AttentionDType bf = AttentionDType::bf16, fp = AttentionDType::fp16;
  // Tiny, every instantiation: one tile, 77 rows (two consumer groups with a partial second).
  for (AttentionDType t : {bf, fp})
    for (int d : {64, 128})
      for (bool causal : {false, true})
        v.push_back({std::string("s77_") + (t == bf ? "bf16" : "fp16") + "_d" + std::to_string(d) +
                         (causal ? "_causal" : ""),
                     t, d, causal, 2, 3, 77, 77});
  // Awkward long sequences (fewer heads for the longest so the naive reference stays quick).
  v.push_back({"s4680_bf16_d128_h12", bf, 128, false, 1, 12, 4680, 4680});
  v.push_back({"s4680_bf16_d64_causal_h4", bf, 64, true, 1, 4, 4680, 4680});
  v.push_back({"s4680_fp16_d128_causal_h3", fp, 128, true, 1, 3, 4680, 4680});
  v.push_back({"s4680_fp16_d64_h12", fp, 64, false, 1, 12, 4680, 4680});
  v.push_back({"s17776_bf16_d128_h1", bf, 128, false, 1, 1, 17776, 17776});
  v.push_back({"s17776_fp16_d64_b2_h1", fp, 64, false, 2, 1, 17776, 17776});
  v.push_back({"s17776_bf16_d128_causal_h1", bf, 128, true, 1, 1, 17776, 17776});
  // Long key sets: the 128 x 192 register-store tile (kv_len >= 8192, d = 128, non-causal)
  // with key tails (17776 = 92 x 192 + 112, 9000 = 46 x 192 + 168), q != kv, fp16, few CTAs,
  // peaked scores (the lazy running max), strided inputs -- and the staged tile forced.
  const auto staged = ops::AttentionTilePolicy::staged;
  v.push_back({"s17776_bf16_d128_staged_h1", bf, 128, false, 1, 1, 17776, 17776, Layout::dense, 0.f, 1.f, 0, staged});
  v.push_back({"q300_kv9000_fp16_d128_longkv", fp, 128, false, 2, 3, 300, 9000});
  v.push_back({"ctas3_bf16_d128_longkv", bf, 128, false, 1, 2, 1000, 8400, Layout::dense, 0.f, 1.f, 3});
  v.push_back({"peaked_fp16_d128_longkv", fp, 128, false, 1, 2, 700, 8192, Layout::dense, 1.0f, 2.5f});
  v.push_back({"packed_qkv_bf16_d128_longkv", bf, 128, false, 1, 2, 8200, 8200, Layout::packed_qkv});
  // Tail split of the long-key tile (last wave's tiles cut along the keys, parts merged):
  // s17776_bf16_d128_h1 above splits 7 tiles in 4 on 132 SMs and ctas3 1 tile in 3; these
  // add 2 parts with peaked scores (the LSE merge) and 4 parts whose last block holds 1 key,
  // plus the same shape with the split switched off.
  v.push_back({"tailsplit2_peaked_fp16_d128", fp, 128, false, 1, 2, 1500, 9000, Layout::dense, 1.0f, 2.5f, 10});
  v.push_back({"tailsplit4_bf16_d128_b2", bf, 128, false, 2, 1, 1250, 8193, Layout::dense, 0.f, 1.f, 9});
  v.push_back({"tailsplit_off_bf16_d128_b2", bf, 128, false, 2, 1, 1250, 8193, Layout::dense, 0.f, 1.f, 9,
               ops::AttentionTilePolicy::automatic, false});
  // The split tile (tile policy split: the staged 128 x 128 mainloop, registers -> global, the
  // last wave split along the keys) at short S: S = 1024 with 24 heads on all SMs (192 tiles,
  // the last 60 in 2 parts on 132 SMs), 48 tiles on 20 CTAs (8 left, 2 parts; S = 1000, q tail),
  // 60 tiles on 50 CTAs (10 left, 4 parts) with peaked scores, 4 tiles on 3 CTAs with the split
  // off, and packed QKV.
  const auto split = ops::AttentionTilePolicy::split;
  v.push_back({"split_s1024_h24_bf16", bf, 128, false, 1, 24, 1024, 1024, Layout::dense, 0.f, 1.f, 0, split});
  v.push_back({"split2_s1000_b2h3_fp16_ctas20", fp, 128, false, 2, 3, 1000, 1000, Layout::dense, 0.f, 1.f, 20, split});
  v.push_back({"split4_peaked_bf16_s1500_h5_ctas50", bf, 128, false, 1, 5, 1500, 1500, Layout::dense, 1.0f, 2.5f, 50,
               split});
  v.push_back({"split_off_fp16_s500_h1_ctas3", fp, 128, false, 1, 1, 500, 700, Layout::dense, 0.f, 1.f, 3, split,
               false});
  v.push_back({"split_packed_qkv_bf16_s1100_h7", bf, 128, false, 1, 7, 1100, 1100, Layout::packed_qkv, 0.f, 1.f, 0,
               split});
  // The d = 64 split tile (the 128-row mainloop, registers -> global), forced: the tail split
  // (S = 1024, 24 heads: 192 tiles, the last 60 in 2 parts) and a q tail on 20 CTAs.
  v.push_back({"split_d64_s1024_h24_bf16", bf, 64, false, 1, 24, 1024, 1024, Layout::dense, 0.f, 1.f, 0, split});
  v.push_back({"split_d64_s1000_b2h3_fp16_ctas20", fp, 64, false, 2, 3, 1000, 1000, Layout::dense, 0.f, 1.f, 20,
               split});
  // Launches short of a wave (automatic policy: the split tile, every tile split into parts of at
  // least 8 key blocks; split_plan.hpp): 16 tiles of 8192 keys in 8 parts with peaked scores,
  // q != kv (12 tiles of 300 rows, 40 key blocks, in 5 parts), 64 tiles in 2 (d = 128), packed QKV
  // (51 tiles in 2), 12 tiles in 3 on 40 CTAs (25 key blocks, the last one 28 keys), and a
  // short launch with the split off (the 128-row tile, whole tiles). d = 128 last waves: S 4608
  // with 4 heads (12 of 144 tiles in 4 parts), S 2500 with 8 (28 of 160 in 4).
  v.push_back({"fill8_peaked_fp16_d64_q2048_kv8192", fp, 64, false, 1, 1, 2048, 8192, Layout::dense, 1.0f, 2.5f});
  v.push_back({"fill5_q300_kv5000_bf16_d64_b2h2", bf, 64, false, 2, 2, 300, 5000});
  v.push_back({"fill2_bf16_d128_s2048_h4", bf, 128, false, 1, 4, 2048, 2048});
  v.push_back({"fill2_packed_qkv_fp16_d64_s2100_h3", fp, 64, false, 1, 3, 2100, 2100, Layout::packed_qkv});
  v.push_back({"fill3_bf16_d64_q1500_kv3100_ctas40", bf, 64, false, 1, 1, 1500, 3100, Layout::dense, 0.f, 1.f, 40});
  v.push_back({"fill_off_bf16_d64_s2048_h4", bf, 64, false, 1, 4, 2048, 2048, Layout::dense, 0.f, 1.f, 0,
               ops::AttentionTilePolicy::automatic, false});
  v.push_back({"tailsplit4_auto_bf16_d128_s4608_h4", bf, 128, false, 1, 4, 4608, 4608});
  v.push_back({"tailsplit4_auto_fp16_d128_s2500_h8", fp, 128, false, 1, 8, 2500, 2500});
  // q_len != kv_len (joint attention), both ways, batch 2.
  v.push_back({"q1000_kv1333_bf16_d128", bf, 128, false, 2, 3, 1000, 1333});
  v.push_back({"q1000_kv1333_bf16_d128_causal", bf, 128, true, 2, 3, 1000, 1333});
  v.push_back({"q1333_kv1000_fp16_d64_causal", fp, 64, true, 2, 3, 1333, 1000});
  v.push_back({"q1333_kv1000_bf16_d64", bf, 64, false, 2, 3, 1333, 1000});
  // Tiny key sets and single rows.
  v.push_back({"q1_kv1_bf16_d128", bf, 128, false, 1, 1, 1, 1});
  v.push_back({"q5_kv3_fp16_d64", fp, 64, false, 2, 3, 5, 3});
  v.push_back({"q300_kv17_bf16_d64_causal", bf, 64, true, 2, 3, 300, 17});
  v.push_back({"q129_kv200_fp16_d128", fp, 128, false, 1, 2, 129, 200});
  // Strided inputs: Q, K, V are slices of one packed [B, S, 3, H, D] tensor.
  v.push_back({"packed_qkv_bf16_d128", bf, 128, false, 2, 3, 1000, 1000, Layout::packed_qkv});
  v.push_back({"packed_qkv_fp16_d64_causal", fp, 64, true, 2, 3, 1000, 1000, Layout::packed_qkv});
  // Persistence: few CTAs, so each walks many tiles (pipeline phases wrap across tiles).
  v.push_back({"ctas1_bf16_d128", bf, 128, false, 2, 3, 1000, 1000, Layout::dense, 0.f, 1.f, 1});
  v.push_back({"ctas7_fp16_d64_causal", fp, 64, true, 2, 3, 1000, 777, Layout::dense, 0.f, 1.f, 7});
  v.push_back({"ctas5_bf16_d128_causal", bf, 128, true, 1, 4, 2000, 2000, Layout::dense, 0.f, 1.f, 5});
  // The 128-row d = 64 tile (policy rows128): tiny, awkward lengths, q != kv, causal, packed
  // inputs, few CTAs, peaked scores.
  const auto rows128 = ops::AttentionTilePolicy::rows128;
  for (AttentionDType t : {bf, fp})
    for (bool causal : {false, true})
      v.push_back({std::string("s77_") + (t == bf ? "bf16" : "fp16") + "_d64" + (causal ? "_causal" : "") + "_rows128", t,
                   64, causal, 2, 3, 77, 77, Layout::dense, 0.f, 1.f, 0, rows128});
  v.push_back({"s1024_bf16_d64_h12_rows128", bf, 64, false, 1, 12, 1024, 1024, Layout::dense, 0.f, 1.f, 0, rows128});
  v.push_back({"s4680_fp16_d64_causal_h4_rows128", fp, 64, true, 1, 4, 4680, 4680, Layout::dense, 0.f, 1.f, 0,
               rows128});
  v.push_back({"q1333_kv1000_bf16_d64_causal_rows128", bf, 64, true, 2, 3, 1333, 1000, Layout::dense, 0.f, 1.f, 0,
               rows128});
  v.push_back({"packed_qkv_fp16_d64_rows128", fp, 64, false, 2, 3, 1000, 1000, Layout::packed_qkv, 0.f, 1.f, 0,
               rows128});
  v.push_back({"ctas5_bf16_d64_rows128", bf, 64, false, 2, 3, 1000, 777, Layout::dense, 0.f, 1.f, 5, rows128});
  v.push_back({"peaked_bf16_d64_rows128", bf, 64, false, 1, 4, 1333, 1333, Layout::dense, 1.0f, 2.5f, 0, rows128});
  // A last-processed key block far above the rest: the reference rises at the last block
  // (amplitude 40) or the exponent against the old one overflows first (400); the 128-row
  // tile, the 192-row tile, causal, d = 128 (docs/attention.md §Softmax instruction budget).
  auto rising = [&](const char* name, ops::AttentionDType t, int d, bool causal, float amp, ops::AttentionTilePolicy pol) {
    Case c{name, t, d, causal, 1, 3, 1100, 1100, Layout::dense, 0.f, 1.f, 0, pol};
    c.key_block0_amplitude = amp;
    v.push_back(c);
  };
  rising("rising_bf16_d64_rows128", bf, 64, false, 40.f, rows128);
  rising("overflow_fp16_d64_rows128", fp, 64, false, 400.f, rows128);
  rising("rising_bf16_d64_causal_rows128", bf, 64, true, 40.f, rows128);
  rising("rising_bf16_d64_causal_rows64", bf, 64, true, 40.f, ops::AttentionTilePolicy::rows64);
  rising("overflow_fp16_d64_causal_rows64", fp, 64, true, 400.f, ops::AttentionTilePolicy::rows64);
  rising("rising_fp16_d128_rows64", fp, 128, false, 40.f, ops::AttentionTilePolicy::rows64);
  rising("overflow_bf16_d64_rows64", bf, 64, false, 400.f, ops::AttentionTilePolicy::rows64);
  rising("overflow_bf16_d128_rows64", bf, 128, false, 400.f, ops::AttentionTilePolicy::rows64);
  rising("overflow_bf16_d64_staged", bf, 64, false, 400.f, ops::AttentionTilePolicy::staged);
  rising("overflow_bf16_d128", bf, 128, false, 400.f, ops::AttentionTilePolicy::automatic);
  // Partial tiles (docs/attention.md §Partial tiles; tile policy partial): warp groups without query
  // rows idle and the partial tiles are dealt last, serpentine (odd rounds wrap backwards): one of
  // three groups busy over 2 rounds on 132 CTAs and 3 on 50, two of three, one round, q != kv,
  // batch 2, packed inputs, peaked scores; the automatic policy's pick at S 1024 with 24 heads.
  const auto part = ops::AttentionTilePolicy::partial;
  v.push_back({"partial_s1024_bf16_d64_h24", bf, 64, false, 1, 24, 1024, 1024, Layout::dense, 0.f, 1.f, 0, part});
  v.push_back({"partial_ctas50_fp16_d64_h24", fp, 64, false, 1, 24, 1024, 1024, Layout::dense, 0.f, 1.f, 50, part});
  v.push_back({"partial_two_q1088_bf16_d64_ctas10", bf, 64, false, 1, 4, 1088, 900, Layout::dense, 0.f, 1.f, 10, part});
  v.push_back({"partial_q1000_fp16_d64_h3", fp, 64, false, 1, 3, 1000, 1000, Layout::dense, 0.f, 1.f, 0, part});
  v.push_back({"partial_q1050_kv777_bf16_d64_b2_ctas7", bf, 64, false, 2, 5, 1050, 777, Layout::dense, 0.f, 1.f, 7, part});
  v.push_back({"partial_packed_qkv_fp16_d64_ctas9", fp, 64, false, 2, 3, 1000, 1000, Layout::packed_qkv, 0.f, 1.f, 9,
               part});
  v.push_back({"partial_peaked_bf16_d64_ctas11", bf, 64, false, 1, 4, 1100, 1100, Layout::dense, 1.0f, 2.5f, 11, part});
  v.push_back({"partial_auto_s1024_fp16_d64_h24", fp, 64, false, 1, 24, 1024, 1024});
  // Key groups, non-causal d = 128 (tile policy rows64, docs/attention.md §Key groups): a one-block
  // tile (group 1 empty), even and odd block counts with key tails, q != kv, batch 2, few CTAs,
  // packed inputs, peaked scores.
  const auto r64 = ops::AttentionTilePolicy::rows64;
  v.push_back({"rows64_s77_bf16_d128", bf, 128, false, 2, 3, 77, 77, Layout::dense, 0.f, 1.f, 0, r64});
  v.push_back({"rows64_s1024_fp16_d128_h24", fp, 128, false, 1, 24, 1024, 1024, Layout::dense, 0.f, 1.f, 0, r64});
  v.push_back({"rows64_q1333_kv1000_bf16_d128_b2", bf, 128, false, 2, 3, 1333, 1000, Layout::dense, 0.f, 1.f, 0, r64});
  v.push_back({"rows64_q500_kv1100_fp16_d128_ctas5", fp, 128, false, 1, 4, 500, 1100, Layout::dense, 0.f, 1.f, 5, r64});
  v.push_back({"rows64_packed_qkv_bf16_d128_ctas7", bf, 128, false, 2, 3, 1000, 1000, Layout::packed_qkv, 0.f, 1.f, 7,
               r64});
  v.push_back({"rows64_peaked_bf16_d128", bf, 128, false, 1, 4, 1333, 1333, Layout::dense, 1.0f, 2.5f, 0, r64});
  // ... and non-causal d = 64: one-block tiles, key tails with q != kv, batch 2, few CTAs, packed
  // inputs, the automatic policy's pick at S 1024 with 8 heads.
  v.push_back({"rows64_s77_fp16_d64", fp, 64, false, 2, 3, 77, 77, Layout::dense, 0.f, 1.f, 0, r64});
  v.push_back({"rows64_q1333_kv1000_bf16_d64_b2", bf, 64, false, 2, 3, 1333, 1000, Layout::dense, 0.f, 1.f, 0, r64});
  v.push_back({"rows64_q500_kv1100_fp16_d64_ctas5", fp, 64, false, 1, 4, 500, 1100, Layout::dense, 0.f, 1.f, 5, r64});
  v.push_back({"rows64_packed_qkv_bf16_d64_ctas7", bf, 64, false, 2, 3, 1000, 1000, Layout::packed_qkv, 0.f, 1.f, 7, r64});
  v.push_back({"rows64_auto_s1024_bf16_d64_h8", bf, 64, false, 1, 8, 1024, 1024});
  // Peaked softmax (large scores): stresses the running-max rescaling.
  v.push_back({"peaked_bf16_d128", bf, 128, false, 1, 4, 1333, 1333, Layout::dense, 1.0f, 2.5f});
  v.push_back({"peaked_fp16_d64_causal", fp, 64, true, 1, 4, 1333, 1333, Layout::dense, 1.0f, 2.5f});
  causal_cases(v);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The device reference itself, against the host fp64 reference on a small problem.
TEST(AttentionGpuReference, AgreesWithHostReference) {
  XS_REQUIRE_GPUS(1);
  for (int variant : {0, 1, 2}) {  // non-causal, causal top-left, causal bottom-right (q < kv)
    ops::AttentionArgs a;
    a.dtype = AttentionDType::bf16;
    a.batch = 2;
    a.heads = 2;
    a.q_len = variant == 2 ? 33 : 45;
    a.kv_len = variant == 2 ? 45 : 33;
    a.head_dim = 64;
    a.causal = variant > 0;
    if (variant == 2) a.causal_align = causal::Align::bottom_right;
    a.q_strides = ops::packed_bshd(a.q_len, a.heads, a.head_dim);
    a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, a.head_dim);
    a.o_strides = a.q_strides;
    const size_t nq = size_t(a.batch) * a.q_len * a.heads * a.head_dim;
    const size_t nkv = size_t(a.batch) * a.kv_len * a.heads * a.head_dim;
    DeviceBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), qf(nq * 4), kf(nkv * 4), vf(nkv * 4), of(nq * 4),
        lf(size_t(a.batch) * a.heads * a.q_len * 4);
    gputest::fill_random_16bit(q.p, nq, a.dtype, 11, 2.f, nullptr);
    gputest::fill_random_16bit(k.p, nkv, a.dtype, 12, 2.f, nullptr);
    gputest::fill_random_16bit(v.p, nkv, a.dtype, 13, 1.f, nullptr);
    a.q = q.p;
    a.k = k.p;
    a.v = v.p;
    gputest::reference_attention(a, of.as<float>(), lf.as<float>(), nullptr);
    gputest::to_float(q.p, nq, a.dtype, qf.as<float>(), nullptr);
    gputest::to_float(k.p, nkv, a.dtype, kf.as<float>(), nullptr);
    gputest::to_float(v.p, nkv, a.dtype, vf.as<float>(), nullptr);
    std::vector<float> hq(nq), hk(nkv), hv(nkv), ho_dev(nq), ho(nq), hl(size_t(a.batch) * a.heads * a.q_len),
        hl_dev(hl.size());
    XS_TEST_CUDA(cudaMemcpy(hq.data(), qf.p, nq * 4, cudaMemcpyDeviceToHost));
    XS_TEST_CUDA(cudaMemcpy(hk.data(), kf.p, nkv * 4, cudaMemcpyDeviceToHost));
    XS_TEST_CUDA(cudaMemcpy(hv.data(), vf.p, nkv * 4, cudaMemcpyDeviceToHost));
    XS_TEST_CUDA(cudaMemcpy(ho_dev.data(), of.p, nq * 4, cudaMemcpyDeviceToHost));
    XS_TEST_CUDA(cudaMemcpy(hl_dev.data(), lf.p, hl.size() * 4, cudaMemcpyDeviceToHost));
    ops::attention_reference_host(a, hq.data(), hk.data(), hv.data(), ho.data(), hl.data());
    for (size_t i = 0; i < nq; ++i) ASSERT_NEAR(ho_dev[i], ho[i], 1e-4) << "element " << i;
    for (size_t i = 0; i < hl.size(); ++i) ASSERT_NEAR(hl_dev[i], hl[i], 1e-4) << "lse " << i;
  }
}

// The automatic order under CUDA graph capture: a causal d = 128 call from 8192 keys runs claimed
// eagerly, but its counters cannot be looked up while the stream captures, so the captured call
// runs grouped — the same bits (CausalOrdersAgreeBitwise). Two graphs of two launches captured on
// one fresh stream replay bit for bit as the eager call on another stream; an explicit claimed
// order under capture is refused with one line.
TEST(AttentionGpu, AutoOrderReplaysFromCudaGraphs) {
  XS_REQUIRE_HOPPER();
  ops::AttentionArgs a;
  a.dtype = AttentionDType::bf16;
  a.batch = 1;
  a.heads = 2;
  a.q_len = a.kv_len = 8300;
  a.head_dim = 128;
  a.causal = true;  // automatic order
  a.q_strides = a.o_strides = ops::packed_bshd(a.q_len, a.heads, a.head_dim);
  a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, a.head_dim);
  const size_t n = size_t(a.q_len) * a.heads * a.head_dim;
  DeviceBuffer q(n * 2), k(n * 2), v(n * 2), ref(n * 2), o1(n * 2), o2(n * 2);
  ASSERT_TRUE(q.p && k.p && v.p && ref.p && o1.p && o2.p);
  gputest::fill_random_16bit(q.p, n, a.dtype, 31, 1.f, nullptr);
  gputest::fill_random_16bit(k.p, n, a.dtype, 32, 1.f, nullptr);
  gputest::fill_random_16bit(v.p, n, a.dtype, 33, 1.f, nullptr);
  a.q = q.p;
  a.k = k.p;
  a.v = v.p;
  a.o = ref.p;
  ASSERT_EQ(ops::causal_order_for(a), causal::TileOrder::claimed);
  cudaStream_t eager = nullptr, s = nullptr;
  XS_TEST_CUDA(cudaStreamCreateWithFlags(&eager, cudaStreamNonBlocking));
  XS_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));  // a new stream: no counters yet
  a.o = ref.p;
  ASSERT_NO_THROW(ops::attention_forward(a, eager));
  XS_TEST_CUDA(cudaStreamSynchronize(eager));
  std::vector<uint16_t> want(n), got(n);
  XS_TEST_CUDA(cudaMemcpy(want.data(), ref.p, n * 2, cudaMemcpyDeviceToHost));

  auto capture = [&](void* out_a, void* out_b, bool reserve, cudaGraphExec_t* ge) {
    cudaGraph_t g = nullptr;
    XS_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (reserve) {  // as the Python op does: the one-time allocation in relaxed mode
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      XS_TEST_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
      EXPECT_NO_THROW(ops::reserve_split_workspace(a, s));
      XS_TEST_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    }
    a.o = out_a;
    EXPECT_NO_THROW(ops::attention_forward(a, s));
    a.o = out_b;
    EXPECT_NO_THROW(ops::attention_forward(a, s));
    a.causal_order = causal::TileOrder::claimed;  // explicit: refused, nothing captured
    EXPECT_THROW(ops::attention_forward(a, s), InvalidArgument);
    a.causal_order = causal::TileOrder::automatic;
    XS_TEST_CUDA(cudaStreamEndCapture(s, &g));
    XS_TEST_CUDA(cudaGraphInstantiate(ge, g, 0));
    XS_TEST_CUDA(cudaGraphDestroy(g));
  };
  cudaGraphExec_t first = nullptr, second = nullptr;
  capture(o1.p, o2.p, true, &first);
  ASSERT_FALSE(HasFatalFailure());
  capture(o2.p, o1.p, false, &second);
  ASSERT_FALSE(HasFatalFailure());
  for (cudaGraphExec_t ge : {second, first, second}) {  // the later graph first: nothing left for a replay to zero
    XS_TEST_CUDA(cudaMemsetAsync(o1.p, 0xFF, n * 2, s));
    XS_TEST_CUDA(cudaMemsetAsync(o2.p, 0xFF, n * 2, s));
    XS_TEST_CUDA(cudaGraphLaunch(ge, s));
    XS_TEST_CUDA(cudaStreamSynchronize(s));
    for (void* o : {o1.p, o2.p}) {
      XS_TEST_CUDA(cudaMemcpy(got.data(), o, n * 2, cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 2), 0) << "graph replay differs from the eager call";
    }
  }
  cudaGraphExecDestroy(first);
  cudaGraphExecDestroy(second);
  cudaStreamDestroy(s);
  cudaStreamDestroy(eager);
}

// The tile order only moves tiles between CTAs: both causal orders give bit-identical O and LSE
// (each tile is computed the same way wherever it runs), for both alignments and head dims.
TEST(AttentionGpu, CausalOrdersAgreeBitwise) {
  XS_REQUIRE_HOPPER();
  for (int d : {64, 128})
    for (causal::Align al : {causal::Align::top_left, causal::Align::bottom_right}) {
      ops::AttentionArgs a;
      a.dtype = AttentionDType::bf16;
      a.batch = 2;
      a.heads = 5;
      a.q_len = 1500;
      a.kv_len = 1900;
      a.head_dim = d;
      a.causal = true;
      a.causal_align = al;
      a.num_ctas = 11;
      a.q_strides = a.o_strides = ops::packed_bshd(a.q_len, a.heads, d);
      a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, d);
      const size_t nq = size_t(a.batch) * a.q_len * a.heads * d, nkv = size_t(a.batch) * a.kv_len * a.heads * d;
      const size_t nl = size_t(a.batch) * a.heads * a.q_len;
      DeviceBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), o1(nq * 2), o2(nq * 2), l1(nl * 4), l2(nl * 4);
      ASSERT_TRUE(q.p && k.p && v.p && o1.p && o2.p && l1.p && l2.p);
      gputest::fill_random_16bit(q.p, nq, a.dtype, 21, 1.f, nullptr);
      gputest::fill_random_16bit(k.p, nkv, a.dtype, 22, 1.f, nullptr);
      gputest::fill_random_16bit(v.p, nkv, a.dtype, 23, 1.f, nullptr);
      XS_TEST_CUDA(cudaMemset(o1.p, 0xFF, nq * 2));
      XS_TEST_CUDA(cudaMemset(o2.p, 0xFF, nq * 2));
      a.q = q.p;
      a.k = k.p;
      a.v = v.p;
      a.return_lse = true;
      a.o = o1.p;
      a.lse = l1.as<float>();
      a.causal_order = causal::TileOrder::head_major;
      ASSERT_NO_THROW(ops::attention_forward(a, nullptr));
      a.o = o2.p;
      a.lse = l2.as<float>();
      a.causal_order = causal::TileOrder::longest_first;
      ASSERT_NO_THROW(ops::attention_forward(a, nullptr));
      XS_TEST_CUDA(cudaDeviceSynchronize());
      if (a.causal_align == causal::Align::top_left) {
        // The grouped order (3 pairs per group of 10) over the longest-first output: same bits.
        a.causal_order = causal::TileOrder::grouped;
        a.causal_group = 3;
        XS_TEST_CUDA(cudaMemset(o2.p, 0xFF, nq * 2));  // poisoned: an unwritten tile cannot match
        ASSERT_NO_THROW(ops::attention_forward(a, nullptr));
        XS_TEST_CUDA(cudaDeviceSynchronize());
        std::vector<uint16_t> h3(nq);
        XS_TEST_CUDA(cudaMemcpy(h3.data(), o2.p, nq * 2, cudaMemcpyDeviceToHost));
        std::vector<uint16_t> hl(nq);
        a.causal_order = causal::TileOrder::longest_first;
        a.causal_group = 0;
        ASSERT_NO_THROW(ops::attention_forward(a, nullptr));
        XS_TEST_CUDA(cudaDeviceSynchronize());
        XS_TEST_CUDA(cudaMemcpy(hl.data(), o2.p, nq * 2, cudaMemcpyDeviceToHost));
        EXPECT_EQ(std::memcmp(h3.data(), hl.data(), nq * 2), 0) << "grouped vs longest-first, d " << d;
        // The claimed order, planned and with groups of 3, three launches each (the counters
        // must be back at zero after every launch): the same bits again, O and LSE.
        std::vector<float> gl(nl), g3(nl);
        XS_TEST_CUDA(cudaMemcpy(gl.data(), l2.p, nl * 4, cudaMemcpyDeviceToHost));
        for (int group : {0, 3})
          for (int rep = 0; rep < 3; ++rep) {
            a.causal_order = causal::TileOrder::claimed;
            a.causal_group = group;
            XS_TEST_CUDA(cudaMemset(o2.p, 0xFF, nq * 2));
            XS_TEST_CUDA(cudaMemset(l2.p, 0xFF, nl * 4));
            ASSERT_NO_THROW(ops::attention_forward(a, nullptr));
            XS_TEST_CUDA(cudaDeviceSynchronize());
            XS_TEST_CUDA(cudaMemcpy(h3.data(), o2.p, nq * 2, cudaMemcpyDeviceToHost));
            XS_TEST_CUDA(cudaMemcpy(g3.data(), l2.p, nl * 4, cudaMemcpyDeviceToHost));
            EXPECT_EQ(std::memcmp(h3.data(), hl.data(), nq * 2), 0)
                << "claimed (group " << group << ", launch " << rep << ") vs longest-first, d " << d;
            EXPECT_EQ(std::memcmp(g3.data(), gl.data(), nl * 4), 0)
                << "claimed LSE (group " << group << ", launch " << rep << "), d " << d;
          }
        a.causal_order = causal::TileOrder::longest_first;
        a.causal_group = 0;
        XS_TEST_CUDA(cudaMemset(o2.p, 0xFF, nq * 2));
        ASSERT_NO_THROW(ops::attention_forward(a, nullptr));
        XS_TEST_CUDA(cudaDeviceSynchronize());
      }
      std::vector<uint16_t> h1(nq), h2(nq);
      std::vector<float> g1(nl), g2(nl);
      XS_TEST_CUDA(cudaMemcpy(h1.data(), o1.p, nq * 2, cudaMemcpyDeviceToHost));
      XS_TEST_CUDA(cudaMemcpy(h2.data(), o2.p, nq * 2, cudaMemcpyDeviceToHost));
      XS_TEST_CUDA(cudaMemcpy(g1.data(), l1.p, nl * 4, cudaMemcpyDeviceToHost));
      XS_TEST_CUDA(cudaMemcpy(g2.data(), l2.p, nl * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(h1.data(), h2.data(), nq * 2), 0) << "d " << d << " align " << ops::causal_align_name(al);
      EXPECT_EQ(std::memcmp(g1.data(), g2.data(), nl * 4), 0) << "d " << d << " align " << ops::causal_align_name(al);
      for (size_t i = 0; i < nq; i += 997) EXPECT_NE(h1[i], 0xFFFF) << "unwritten output element " << i;
    }
}

// Two launches on one stream, into poisoned outputs, give bit-identical outputs (no state
// leaks between launches) and each matches the reference row by row (so deterministic garbage,
// or an output left unwritten, fails).
TEST(AttentionGpu, RunsTwiceOnOneStreamAndIsDeterministic) {
  XS_REQUIRE_HOPPER();
  ops::AttentionArgs a;
  a.dtype = AttentionDType::bf16;
  a.batch = 1;
  a.heads = 2;
  a.q_len = a.kv_len = 700;
  a.head_dim = 128;
  a.q_strides = a.k_strides = a.v_strides = a.o_strides = ops::packed_bshd(700, 2, 128);
  const size_t n = size_t(700) * 2 * 128;
  DeviceBuffer q(n * 2), k(n * 2), v(n * 2), o1(n * 2), o2(n * 2), o_ref(n * 4), lse_ref(size_t(2) * 700 * 4);
  ASSERT_TRUE(q.p && k.p && v.p && o1.p && o2.p && o_ref.p && lse_ref.p);
  gputest::fill_random_16bit(q.p, n, a.dtype, 1, 1.f, nullptr);
  gputest::fill_random_16bit(k.p, n, a.dtype, 2, 1.f, nullptr);
  gputest::fill_random_16bit(v.p, n, a.dtype, 3, 1.f, nullptr);
  XS_TEST_CUDA(cudaMemset(o1.p, 0xFF, n * 2));  // NaN in bf16: what a launch does not write stays NaN
  XS_TEST_CUDA(cudaMemset(o2.p, 0xFF, n * 2));
  a.q = q.p;
  a.k = k.p;
  a.v = v.p;
  gputest::reference_attention(a, o_ref.as<float>(), lse_ref.as<float>(), nullptr);
  a.o = o1.p;
  ops::attention_forward(a, nullptr);
  a.o = o2.p;
  ops::attention_forward(a, nullptr);
  XS_TEST_CUDA(cudaDeviceSynchronize());
  for (DeviceBuffer* o : {&o1, &o2}) {
    a.o = o->p;
    const gputest::OutputCheck oc = gputest::check_output(a, a.q_len, o_ref.as<float>(), nullptr);
    const std::string what = o == &o1 ? "first launch" : "second launch";
    EXPECT_EQ(oc.nan_valid, 0u) << what << ": non-finite (unwritten) outputs";
    EXPECT_GT(oc.ref_sq, 0.0);
    EXPECT_LT(oc.rel(), 1e-2) << what << ": relative error " << oc.rel();
    expect_rows_ok(oc, what);
  }
  std::vector<uint16_t> h1(n), h2(n);
  XS_TEST_CUDA(cudaMemcpy(h1.data(), o1.p, n * 2, cudaMemcpyDeviceToHost));
  XS_TEST_CUDA(cudaMemcpy(h2.data(), o2.p, n * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(h1, h2);
}

// A key split is deterministic: repeated launches on one stream give identical results, they
// match the reference row by row, and they agree with the unsplit kernel (to rounding: the parts
// are merged; bit-equality would be correct too).
void expect_split_repeats_and_matches_unsplit(ops::AttentionArgs a) {
  const int d = a.head_dim;
  a.q_strides = a.o_strides = ops::packed_bshd(a.q_len, a.heads, d);
  a.k_strides = a.v_strides = ops::packed_bshd(a.kv_len, a.heads, d);
  const size_t nq = size_t(a.batch) * a.q_len * a.heads * d, nkv = size_t(a.batch) * a.kv_len * a.heads * d;
  DeviceBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), o1(nq * 2), o2(nq * 2), o3(nq * 2), o4(nq * 2), o_ref(nq * 4),
      lse_ref(size_t(a.batch) * a.heads * a.q_len * 4);
  ASSERT_TRUE(q.p && k.p && v.p && o1.p && o2.p && o3.p && o4.p && o_ref.p && lse_ref.p);
  gputest::fill_random_16bit(q.p, nq, a.dtype, 11, 1.f, nullptr);
  gputest::fill_random_16bit(k.p, nkv, a.dtype, 12, 1.f, nullptr);
  gputest::fill_random_16bit(v.p, nkv, a.dtype, 13, 1.f, nullptr);
  a.q = q.p;
  a.k = k.p;
  a.v = v.p;
  for (DeviceBuffer* o : {&o1, &o2, &o3, &o4}) XS_TEST_CUDA(cudaMemset(o->p, 0xFF, nq * 2));
  for (DeviceBuffer* o : {&o1, &o2, &o3}) {
    a.o = o->p;
    ops::attention_forward(a, nullptr);
  }
  a.tail_split = false;
  a.o = o4.p;
  ops::attention_forward(a, nullptr);
  gputest::reference_attention(a, o_ref.as<float>(), lse_ref.as<float>(), nullptr);
  XS_TEST_CUDA(cudaDeviceSynchronize());
  for (DeviceBuffer* o : {&o1, &o3, &o4}) {
    a.o = o->p;
    const gputest::OutputCheck oc = gputest::check_output(a, a.q_len, o_ref.as<float>(), nullptr);
    const std::string what = o == &o1 ? "split" : o == &o3 ? "split, third launch" : "unsplit";
    EXPECT_EQ(oc.nan_valid, 0u) << what << ": non-finite (unwritten) outputs";
    EXPECT_LT(oc.rel(), 1e-2) << what << ": relative error " << oc.rel();
    expect_rows_ok(oc, what);
  }
  std::vector<uint16_t> h1(nq), h2(nq), h3(nq), h4(nq);
  XS_TEST_CUDA(cudaMemcpy(h1.data(), o1.p, nq * 2, cudaMemcpyDeviceToHost));
  XS_TEST_CUDA(cudaMemcpy(h2.data(), o2.p, nq * 2, cudaMemcpyDeviceToHost));
  XS_TEST_CUDA(cudaMemcpy(h3.data(), o3.p, nq * 2, cudaMemcpyDeviceToHost));
  XS_TEST_CUDA(cudaMemcpy(h4.data(), o4.p, nq * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(h1, h3);
  const bool bf = a.dtype == AttentionDType::bf16;
  auto f = [bf](uint16_t h) { return double(cli::half_bits_to_float(h, bf)); };
  double num = 0, den = 0;
  size_t nonfinite = 0;
  for (size_t i = 0; i < nq; ++i) {
    if (!std::isfinite(f(h1[i])) || !std::isfinite(f(h4[i]))) ++nonfinite;
    num += (f(h1[i]) - f(h4[i])) * (f(h1[i]) - f(h4[i]));
    den += f(h4[i]) * f(h4[i]);
  }
  EXPECT_EQ(nonfinite, 0u);
  EXPECT_LT(std::sqrt(num / den), 1e-2);
}

// The tail split: 20 tiles on 9 CTAs leave 2, split in 4. The shape is one the operator runs on
// the long-key tile with a split last wave (that choice is pinned by
// AttentionDispatch.LongKeySetsGetTheLongTileUnlessStagedIsAsked on the CPU, not here).
TEST(AttentionGpu, TailSplitRepeatsAndMatchesTheUnsplitKernel) {
  XS_REQUIRE_HOPPER();
  ops::AttentionArgs a;
  a.dtype = AttentionDType::bf16;
  a.batch = 2;
  a.heads = 1;
  a.q_len = 1250;  // 10 q tiles per batch
  a.kv_len = 8193;
  a.head_dim = 128;
  a.num_ctas = 9;
  expect_split_repeats_and_matches_unsplit(a);
}

// The split tile forced on launches short of a wave whose tiles the fill split leaves whole (the
// launches the removed stream fill cut: docs/attention.md §Stream fill), so it runs whole tiles.
// d = 64: 96 tiles of 8 key blocks on 132 SMs (S 1024, 12 heads), 12 tiles of 10 blocks (the last
// 98 keys) on 20 CTAs, fp16 q != kv with batch 2 (80 tiles of 9 blocks). d = 128: S 1024, 12 heads.
TEST(AttentionGpu, SplitTileOnShortLaunchesRepeatsAndMatchesTheUnsplitKernel) {
  XS_REQUIRE_HOPPER();
  struct Shape {
    AttentionDType t;
    int d, batch, heads, q_len, kv_len, ctas;
  };
  const AttentionDType bf = AttentionDType::bf16, fp = AttentionDType::fp16;
  for (const Shape& c : {Shape{bf, 64, 1, 12, 1024, 1024, 0}, Shape{bf, 64, 1, 1, 1500, 1250, 20},
                         Shape{fp, 64, 2, 5, 1000, 1100, 0}, Shape{fp, 128, 1, 12, 1024, 1024, 0}}) {
    SCOPED_TRACE(::testing::Message() << "d " << c.d << " b " << c.batch << " h " << c.heads << " q " << c.q_len
                                      << " kv " << c.kv_len << " ctas " << c.ctas);
    ops::AttentionArgs a;
    a.dtype = c.t;
    a.batch = c.batch;
    a.heads = c.heads;
    a.q_len = c.q_len;
    a.kv_len = c.kv_len;
    a.head_dim = c.d;
    a.num_ctas = c.ctas;
    a.tile_policy = ops::AttentionTilePolicy::split;
    expect_split_repeats_and_matches_unsplit(a);
  }
}

}  // namespace
#endif  // XSTAGE_HAVE_ATTENTION
