// The unfused expert-parallel MoE layer (include/xstage/ops/ep_moe.hpp): the shared buffers
// (ep_moe_buffers.hpp), the GEMMs' scratch, and the five transport kernels around the two
// grouped GEMMs per call.
#include "xstage/ops/ep_moe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kernels/moe/ep_per_token.hpp"
#include "kernels/moe/ep_transport.hpp"
#include "ops/ep_moe_buffers.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_gemm.hpp"

namespace xstage::ops {
namespace km = kernels::moe;

void validate_ep_moe(const EpMoeConfig& c, int world) {
  auto bad = [](const std::string& m) { throw InvalidArgument("ep moe: " + m); };
  if (world < 1 || world > km::kEpMaxRanks) bad(fmt::format("needs 1..{} ranks, team has {}", km::kEpMaxRanks, world));
  if (c.hidden <= 0 || c.hidden % 128) bad(fmt::format("hidden {} must be a positive multiple of 128", c.hidden));
  if (c.intermediate <= 0 || c.intermediate % 128)
    bad(fmt::format("intermediate {} must be a positive multiple of 128", c.intermediate));
  if (c.experts < world || c.experts % world || c.experts > km::kEpMaxExperts)
    bad(fmt::format("{} experts must split evenly over {} ranks (and be at most {})", c.experts, world,
                    km::kEpMaxExperts));
  if (c.top_k < 1 || c.top_k > c.experts) bad(fmt::format("top_k {} must be in 1..{}", c.top_k, c.experts));
  if (c.tokens < 1) bad(fmt::format("tokens per rank must be >= 1, got {}", c.tokens));
  if (static_cast<long long>(c.tokens) * c.top_k >= (1LL << 24))
    bad(fmt::format("tokens x top_k = {} rows per rank must stay below 2^24 (the row-origin encoding)",
                    static_cast<long long>(c.tokens) * c.top_k));
  if (static_cast<long long>(world) * c.tokens * c.top_k > (1LL << 30))
    bad("world * tokens * top_k rows exceed the index range");
}

struct EpMoeLayer::Impl {
  EpMoeBuffers buf;
  struct Rank {
    int32_t* expert_counts = nullptr;
    int32_t* expert_offsets = nullptr;
    uint64_t* rows_expected = nullptr;
    void* h = nullptr;          // [cap, I] fp8
    float* h_scales = nullptr;  // [I/128, cap]
    void* y = nullptr;          // [cap, H] bf16
    // Per-token activations (EpMoeRankInputs::act): h's per-token scales [cap] (small; allocated
    // with the rest, not in a call).
    float* h_tok = nullptr;
  };
  std::vector<Rank> ranks;
  Impl(Team& t, const EpMoeConfig& c) : buf(t, c, "ep moe") {}
};

EpMoeLayer::EpMoeLayer(Team& team, const EpMoeConfig& cfg) : impl_(std::make_unique<Impl>(team, cfg)) {
  Impl& I = *impl_;
  const size_t H = cfg.hidden, cap = I.buf.cap;
  I.ranks.resize(team.local_count());
  for (int i = 0; i < team.local_count(); ++i) {
    Impl::Rank& R = I.ranks[i];
    const std::string where = fmt::format("ep moe: setting up rank {}", team.rank(i));
    XS_CUDA(cudaSetDevice(team.device(i)), where);
    XS_CUDA(cudaMalloc(&R.expert_counts, sizeof(int32_t) * I.buf.epr), where);
    XS_CUDA(cudaMalloc(&R.expert_offsets, sizeof(int32_t) * I.buf.epr), where);
    // Zero layouts: if a call's counts never arrive (timeout), the GEMMs and the combine of
    // that call see empty experts instead of garbage.
    XS_CUDA(cudaMemset(R.expert_counts, 0, sizeof(int32_t) * I.buf.epr), where);
    XS_CUDA(cudaMemset(R.expert_offsets, 0, sizeof(int32_t) * I.buf.epr), where);
    XS_CUDA(cudaMalloc(&R.rows_expected, sizeof(uint64_t)), where);
    XS_CUDA(cudaMemset(R.rows_expected, 0, sizeof(uint64_t)), where);
    XS_CUDA(cudaMalloc(&R.h, cap * cfg.intermediate), where + ": h");
    XS_CUDA(cudaMalloc(&R.h_scales, sizeof(float) * (cfg.intermediate / 128) * cap), where + ": h scales");
    XS_CUDA(cudaMalloc(&R.y, 2 * cap * H), where + ": y");
    XS_CUDA(cudaMalloc(&R.h_tok, sizeof(float) * cap), where + ": h token scales");
    km::EpMoeArgs& a = I.buf.args[i];
    a.expert_counts = R.expert_counts;
    a.expert_offsets = R.expert_offsets;
    a.rows_expected = R.rows_expected;
    a.y = static_cast<const uint16_t*>(R.y);
  }
}

EpMoeLayer::~EpMoeLayer() {
  Impl& I = *impl_;
  for (size_t i = 0; i < I.ranks.size(); ++i) {
    auto& R = I.ranks[i];
    cudaSetDevice(I.buf.team.device(static_cast<int>(i)));
    cudaDeviceSynchronize();
    for (void* p : {static_cast<void*>(R.expert_counts), static_cast<void*>(R.expert_offsets),
                    static_cast<void*>(R.rows_expected), R.h, static_cast<void*>(R.h_scales), R.y,
                    static_cast<void*>(R.h_tok)})
      cudaFree(p);
  }
}

void EpMoeLayer::forward(int i, const EpMoeRankInputs& in, cudaStream_t s) { run(i, in, s, nullptr); }

void EpMoeLayer::forward(int i, const EpMoeRankInputs& in, cudaStream_t s, const EpMoePhaseEvents& phases) {
  run(i, in, s, &phases);
}

EpMoePhaseTimes ep_moe_phase_times(const EpMoePhaseEvents& ev) {
  float ms[5] = {};
  for (int k = 0; k < 5; ++k)
    XS_CUDA(cudaEventElapsedTime(&ms[k], ev.at[k], ev.at[k + 1]), "ep moe: phase times (were the events recorded?)");
  return {ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3, ms[3] * 1e3, ms[4] * 1e3};
}

void EpMoeLayer::run(int i, const EpMoeRankInputs& in, cudaStream_t s, const EpMoePhaseEvents* ph) {
  Impl& I = *impl_;
  Impl::Rank& R = I.ranks.at(i);
  const EpMoeConfig& c = I.buf.cfg;
  const km::EpMoeArgs& fixed = I.buf.args.at(i);  // this rank's buffers (the call's fields come below)
  const bool per_token = in.act == MoeActScales::per_token;
  // The layer's own format checks first: the GEMMs' below would name what a wrong combination
  // maps to (e.g. the glu layout the per-token Linear-1 would need), not the combination.
  I.buf.check_formats(in);
  const int ctas = I.buf.sm_count[i];
  const int hint = std::max(1, I.buf.cap / I.buf.world / I.buf.epr);
  // Both GEMMs' arguments first: a format, layout or activation-scale combination no grouped GEMM
  // serves is refused here, before next_call counts the call (a call refused after its dispatch
  // would leave the combine counter short for every later call).
  MoeGemmArgs l1;
  l1.quant = in.quant;
  l1.epilogue = MoeEpilogue::swiglu_fp8;
  l1.experts = I.buf.epr;
  l1.m_total = I.buf.cap;
  l1.n = 2 * c.intermediate;
  l1.k = c.hidden;
  l1.a = fixed.recv_x_at[fixed.rank];
  l1.a_scales = fixed.recv_xs_at[fixed.rank];
  l1.b = in.w1;
  l1.b_scales = in.w1_scales;
  l1.b_e8m0 = in.w1_e8m0;
  l1.b_layout = in.w_layout;
  if (per_token) {
    // The per-token Linear-1: gate/up-interleaved W1; a row's scale is its first 128-column one.
    l1.b_layout = in.w_layout == MoeWeightLayout::int4_rs_lut ? MoeWeightLayout::int4_rs_lut_glu
                                                               : MoeWeightLayout::mxfp4_rs_glu;
    l1.a_scale_granularity = MoeActScales::per_token;
  }
  l1.counts = R.expert_counts;
  l1.offsets = R.expert_offsets;
  l1.out = R.h;
  l1.out_scales = R.h_scales;
  l1.row_weights = fixed.recv_w_at[fixed.rank];
  l1.tokens_per_expert_hint = hint;
  l1.num_ctas = ctas;
  MoeGemmArgs l2;
  l2.quant = in.quant;
  l2.epilogue = MoeEpilogue::bf16;
  l2.experts = I.buf.epr;
  l2.m_total = I.buf.cap;
  l2.n = c.hidden;
  l2.k = c.intermediate;
  l2.a = R.h;
  l2.a_scales = R.h_scales;
  l2.b = in.w2;
  l2.b_scales = in.w2_scales;
  l2.b_e8m0 = in.w2_e8m0;
  l2.b_layout = in.w_layout;
  if (per_token) {
    l2.a_scales = R.h_tok;
    l2.a_scale_granularity = MoeActScales::per_token;
  }
  l2.counts = R.expert_counts;
  l2.offsets = R.expert_offsets;
  l2.out = R.y;
  l2.tokens_per_expert_hint = hint;
  l2.num_ctas = ctas;
  if (in.w1 != nullptr && in.w2 != nullptr) {  // null weights: next_call's error names them
    try {
      for (const MoeGemmArgs* g : {&l1, &l2}) {
        validate(*g);
        select_moe_instantiation(*g);  // the kernel that serves the call
      }
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("ep moe: {}{}", e.what(),
                                        in.w_layout == MoeWeightLayout::mxfp4_rs && !per_token
                                            ? " (mxfp4_rs weights run with per-token activations in the unfused layer)"
                                            : ""));
    }
  }

  km::EpMoeArgs a = I.buf.next_call(i, in);
  const std::string what = fmt::format("ep moe (rank {}, call {})", a.rank, a.epoch);
  auto mark = [&](int k) {
    if (ph != nullptr) XS_CUDA(cudaEventRecord(ph->at[k], s), what + ": phase event");
  };
  mark(0);
  XS_CUDA(km::ep_launch_counts(a, s), what + ": counts");
  // Per-token: x_scales [T] as given; the dispatch moves each row's one scale into the first group
  // of the receive scales, which the per-token Linear-1 reads.
  XS_CUDA(km::ep_launch_dispatch(a, ctas, s, per_token), what + ": dispatch");
  XS_CUDA(km::ep_launch_layout(a, s), what + ": layout");
  mark(1);
  moe_gemm(l1, s);
  if (per_token)
    XS_CUDA(km::ep_launch_requant_per_token(static_cast<uint8_t*>(R.h), R.h_scales, R.h_tok, R.expert_counts,
                                            R.expert_offsets, I.buf.epr, I.buf.cap, c.intermediate, s),
            what + ": h per-token requantisation");
  mark(2);
  moe_gemm(l2, s);
  mark(3);
  XS_CUDA(km::ep_launch_combine(a, ctas, s), what + ": combine");
  mark(4);
  XS_CUDA(km::ep_launch_reduce(a, ctas, s), what + ": reduce");
  mark(5);
}

}  // namespace xstage::ops
