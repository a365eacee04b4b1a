// The unfused expert-parallel MoE layer (include/xstage/ops/ep_moe.hpp): buffers, peer
// pointers, and the five transport kernels around the two grouped GEMMs per call.
#include "xstage/ops/ep_moe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kernels/common/peer_pointers.hpp"
#include "kernels/moe/ep_transport.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_gemm.hpp"

namespace xstage::ops {
namespace km = kernels::moe;

void validate_ep_moe(const EpMoeConfig& c, int world) {
  auto bad = [](const std::string& m) { throw InvalidArgument("ep moe: " + m); };
  if (world < 2 || world > km::kEpMaxRanks) bad(fmt::format("needs 2..{} ranks, team has {}", km::kEpMaxRanks, world));
  if (c.hidden <= 0 || c.hidden % 128) bad(fmt::format("hidden {} must be a positive multiple of 128", c.hidden));
  if (c.intermediate <= 0 || c.intermediate % 128)
    bad(fmt::format("intermediate {} must be a positive multiple of 128", c.intermediate));
  if (c.experts < world || c.experts % world || c.experts > km::kEpMaxExperts)
    bad(fmt::format("{} experts must split evenly over {} ranks (and be at most {})", c.experts, world,
                    km::kEpMaxExperts));
  if (c.top_k < 1 || c.top_k > c.experts) bad(fmt::format("top_k {} must be in 1..{}", c.top_k, c.experts));
  if (c.tokens < 1) bad(fmt::format("tokens per rank must be >= 1, got {}", c.tokens));
  if (static_cast<long long>(world) * c.tokens * c.top_k > (1LL << 30))
    bad("world * tokens * top_k rows exceed the index range");
}

struct EpMoeLayer::Impl {
  Team& team;
  EpMoeConfig cfg;
  int world = 0, epr = 0, cap = 0;
  SymmetricBuffer* sym = nullptr;
  size_t ctrl_offset = 0;
  // Byte offsets inside the symmetric buffer.
  size_t off_counts = 0, off_x = 0, off_xs = 0, off_w = 0, off_src = 0, off_comb = 0, sym_bytes = 0;
  struct Rank {
    km::EpMoeArgs args;
    int sm_count = 132;
    int32_t* row_slot = nullptr;
    int32_t* expert_counts = nullptr;
    int32_t* expert_offsets = nullptr;
    uint64_t* rows_expected = nullptr;
    void* h = nullptr;          // [cap, I] fp8
    float* h_scales = nullptr;  // [I/128, cap]
    void* y = nullptr;          // [cap, H] bf16
  };
  std::vector<Rank> ranks;
  Impl(Team& t, const EpMoeConfig& c) : team(t), cfg(c) {}
};

namespace {
size_t align_up(size_t v) { return (v + 255) & ~size_t(255); }
}  // namespace

EpMoeLayer::EpMoeLayer(Team& team, const EpMoeConfig& cfg) : impl_(std::make_unique<Impl>(team, cfg)) {
  Impl& I = *impl_;
  validate_ep_moe(cfg, team.world_size());
  I.world = team.world_size();
  I.epr = cfg.experts / I.world;
  I.cap = I.world * cfg.tokens * cfg.top_k;
  const size_t H = cfg.hidden, cap = I.cap;
  size_t o = 0;
  I.off_counts = o, o = align_up(o + sizeof(int32_t) * 2 * I.world * cfg.experts);
  I.off_x = o, o = align_up(o + cap * H);
  I.off_xs = o, o = align_up(o + sizeof(float) * (H / 128) * cap);
  I.off_w = o, o = align_up(o + sizeof(float) * cap);
  I.off_src = o, o = align_up(o + sizeof(int32_t) * cap);
  I.off_comb = o, o = align_up(o + 2 * H * size_t(cfg.tokens) * cfg.top_k);
  I.sym_bytes = o;
  I.sym = &team.alloc_symmetric(I.sym_bytes);
  // ctrl: ready[P], counts flag, rows flag, combine flag.
  I.ctrl_offset = team.reserve_ctrl(sizeof(uint64_t) * (I.world + 3));

  I.ranks.resize(team.local_count());
  for (int i = 0; i < team.local_count(); ++i) {
    Impl::Rank& R = I.ranks[i];
    const int rank = team.rank(i);
    const std::string where = fmt::format("ep moe: setting up rank {}", rank);
    XS_CUDA(cudaSetDevice(team.device(i)), where);
    XS_CUDA(cudaDeviceGetAttribute(&R.sm_count, cudaDevAttrMultiProcessorCount, team.device(i)), where);
    XS_CUDA(cudaMalloc(&R.row_slot, sizeof(int32_t) * cfg.tokens * cfg.top_k), where);
    XS_CUDA(cudaMalloc(&R.expert_counts, sizeof(int32_t) * I.epr), where);
    XS_CUDA(cudaMalloc(&R.expert_offsets, sizeof(int32_t) * I.epr), where);
    // Zero layouts: if a call's counts never arrive (timeout), the GEMMs and the combine of
    // that call see empty experts instead of garbage.
    XS_CUDA(cudaMemset(R.expert_counts, 0, sizeof(int32_t) * I.epr), where);
    XS_CUDA(cudaMemset(R.expert_offsets, 0, sizeof(int32_t) * I.epr), where);
    XS_CUDA(cudaMalloc(&R.rows_expected, sizeof(uint64_t)), where);
    XS_CUDA(cudaMemset(R.rows_expected, 0, sizeof(uint64_t)), where);
    XS_CUDA(cudaMalloc(&R.h, cap * cfg.intermediate), where + ": h");
    XS_CUDA(cudaMalloc(&R.h_scales, sizeof(float) * (cfg.intermediate / 128) * cap), where + ": h scales");
    XS_CUDA(cudaMalloc(&R.y, 2 * cap * H), where + ": y");
    km::EpMoeArgs& a = R.args;
    a.rank = rank;
    a.world = I.world;
    a.tokens = cfg.tokens;
    a.top_k = cfg.top_k;
    a.experts = cfg.experts;
    a.experts_per_rank = I.epr;
    a.hidden = cfg.hidden;
    a.cap = I.cap;
    void* base[km::kEpMaxRanks] = {};
    void* ctrl[km::kEpMaxRanks] = {};
    void* ready_slot[km::kEpMaxRanks] = {};
    XS_CUDA(kernels::resolve_peer_pointers(I.sym->window[i], 0, I.world, base), where + ": peer buffers");
    XS_CUDA(kernels::resolve_peer_pointers(team.ctrl().window[i], I.ctrl_offset, I.world, ctrl), where + ": peer flags");
    XS_CUDA(kernels::resolve_peer_pointers(team.ctrl().window[i], I.ctrl_offset + sizeof(uint64_t) * rank, I.world,
                                         ready_slot),
            where + ": peer ready slots");
    for (int p = 0; p < I.world; ++p) {
      char* b = static_cast<char*>(base[p]);
      a.counts_at[p] = reinterpret_cast<int32_t*>(b + I.off_counts);
      a.recv_x_at[p] = reinterpret_cast<uint8_t*>(b + I.off_x);
      a.recv_xs_at[p] = reinterpret_cast<float*>(b + I.off_xs);
      a.recv_w_at[p] = reinterpret_cast<float*>(b + I.off_w);
      a.recv_src_at[p] = reinterpret_cast<int32_t*>(b + I.off_src);
      a.combine_at[p] = reinterpret_cast<uint16_t*>(b + I.off_comb);
      uint64_t* f = static_cast<uint64_t*>(ctrl[p]);
      a.ready_at_peer[p] = static_cast<uint64_t*>(ready_slot[p]);
      a.counts_flag_at[p] = f + I.world;
      a.rows_flag_at[p] = f + I.world + 1;
      a.combine_flag_at[p] = f + I.world + 2;
    }
    a.ready = static_cast<const uint64_t*>(ctrl[rank]);
    a.row_slot = R.row_slot;
    a.expert_counts = R.expert_counts;
    a.expert_offsets = R.expert_offsets;
    a.rows_expected = R.rows_expected;
    a.y = static_cast<const uint16_t*>(R.y);
    const TeamDevice td = team.device_view(i);
    a.status = td.status;
    a.timeout_ns = td.timeout_ns;
  }
}

EpMoeLayer::~EpMoeLayer() {
  Impl& I = *impl_;
  for (size_t i = 0; i < I.ranks.size(); ++i) {
    auto& R = I.ranks[i];
    cudaSetDevice(I.team.device(static_cast<int>(i)));
    cudaDeviceSynchronize();
    for (void* p : {static_cast<void*>(R.row_slot), static_cast<void*>(R.expert_counts),
                    static_cast<void*>(R.expert_offsets), static_cast<void*>(R.rows_expected), R.h,
                    static_cast<void*>(R.h_scales), R.y})
      cudaFree(p);
  }
  try {
    I.team.free_symmetric(*I.sym);
  } catch (...) {
  }
}

void EpMoeLayer::forward(int i, const EpMoeRankInputs& in, cudaStream_t s) {
  Impl& I = *impl_;
  Impl::Rank& R = I.ranks.at(i);
  const EpMoeConfig& c = I.cfg;
  auto need = [](const void* p, size_t align, const char* what) {
    if (p == nullptr) throw InvalidArgument(fmt::format("ep moe: {} is null", what));
    if (reinterpret_cast<uintptr_t>(p) % align)
      throw InvalidArgument(fmt::format("ep moe: {} must be {}-byte aligned", what, align));
  };
  need(in.topk_experts, 4, "topk_experts");
  need(in.topk_weights, 4, "topk_weights");
  need(in.x, 16, "x");
  need(in.x_scales, 4, "x_scales");
  need(in.w1, 16, "w1");
  need(in.w1_scales, 4, "w1_scales");
  need(in.w2, 16, "w2");
  need(in.w2_scales, 4, "w2_scales");
  need(in.out, 16, "out");
  km::EpMoeArgs a = R.args;
  a.epoch = ++R.args.epoch;
  a.topk_experts = in.topk_experts;
  a.topk_weights = in.topk_weights;
  a.x = static_cast<const uint8_t*>(in.x);
  a.x_scales = in.x_scales;
  a.out = static_cast<uint16_t*>(in.out);
  const std::string what = fmt::format("ep moe (rank {}, call {})", a.rank, a.epoch);
  const int ctas = R.sm_count;
  XS_CUDA(km::ep_launch_counts(a, s), what + ": counts");
  XS_CUDA(km::ep_launch_dispatch(a, ctas, s), what + ": dispatch");
  XS_CUDA(km::ep_launch_layout(a, s), what + ": layout");

  const int hint = std::max(1, I.cap / I.world / I.epr);
  MoeGemmArgs l1;
  l1.epilogue = MoeEpilogue::swiglu_fp8;
  l1.experts = I.epr;
  l1.m_total = I.cap;
  l1.n = 2 * c.intermediate;
  l1.k = c.hidden;
  l1.a = a.recv_x_at[a.rank];
  l1.a_scales = a.recv_xs_at[a.rank];
  l1.b = in.w1;
  l1.b_scales = in.w1_scales;
  l1.counts = R.expert_counts;
  l1.offsets = R.expert_offsets;
  l1.out = R.h;
  l1.out_scales = R.h_scales;
  l1.row_weights = a.recv_w_at[a.rank];
  l1.tokens_per_expert_hint = hint;
  moe_gemm(l1, s);
  MoeGemmArgs l2;
  l2.epilogue = MoeEpilogue::bf16;
  l2.experts = I.epr;
  l2.m_total = I.cap;
  l2.n = c.hidden;
  l2.k = c.intermediate;
  l2.a = R.h;
  l2.a_scales = R.h_scales;
  l2.b = in.w2;
  l2.b_scales = in.w2_scales;
  l2.counts = R.expert_counts;
  l2.offsets = R.expert_offsets;
  l2.out = R.y;
  l2.tokens_per_expert_hint = hint;
  moe_gemm(l2, s);

  XS_CUDA(km::ep_launch_combine(a, ctas, s), what + ": combine");
  XS_CUDA(km::ep_launch_reduce(a, ctas, s), what + ": reduce");
}

}  // namespace xstage::ops
