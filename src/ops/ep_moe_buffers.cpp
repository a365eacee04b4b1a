// Expert-parallel MoE buffers (ep_moe_buffers.hpp): one symmetric allocation holding, per rank,
// the count matrix, receive rows (fp8 x, scales, router weight, origin) and the combine buffer;
// control flags ready[P], counts, rows, combine in the team's control window.
#include "ops/ep_moe_buffers.hpp"

#include <fmt/format.h>

#include <string>

#include "runtime/check.hpp"
#include "xstage/error.hpp"

namespace xstage::ops {
namespace km = kernels::moe;

namespace {
size_t align_up(size_t v) { return (v + 255) & ~size_t(255); }
}  // namespace

EpMoeBuffers::EpMoeBuffers(Team& t, const EpMoeConfig& c, const char* what) : team(t), cfg(c), what_(what) {
  validate_ep_moe(cfg, team.world_size());
  world = team.world_size();
  epr = cfg.experts / world;
  cap = world * cfg.tokens * cfg.top_k;
  const size_t H = cfg.hidden, capz = cap;
  size_t o = 0;
  const size_t off_counts = o;
  o = align_up(o + sizeof(int32_t) * 2 * world * cfg.experts);
  const size_t off_x = o;
  o = align_up(o + capz * H);
  const size_t off_xs = o;
  o = align_up(o + sizeof(float) * (H / 128) * capz);
  const size_t off_w = o;
  o = align_up(o + sizeof(float) * capz);
  const size_t off_src = o;
  o = align_up(o + sizeof(int32_t) * capz);
  const size_t off_comb = o;
  o = align_up(o + 2 * H * size_t(cfg.tokens) * cfg.top_k);
  sym_ = &team.alloc_symmetric(o);
  // ctrl: ready[P], counts flag, rows flag, combine flag.
  const size_t ctrl_offset = team.reserve_ctrl(sizeof(uint64_t) * (world + 3));

  args.resize(team.local_count());
  sm_count.assign(team.local_count(), 0);
  row_slot_.assign(team.local_count(), nullptr);
  for (int i = 0; i < team.local_count(); ++i) {
    const int rank = team.rank(i);
    const std::string where = fmt::format("{}: setting up rank {}", what_, rank);
    XS_CUDA(cudaSetDevice(team.device(i)), where);
    sm_count[i] = team.sm_count(i);  // the whole GPU, or the virtual rank's partition
    XS_CUDA(cudaMalloc(&row_slot_[i], sizeof(int32_t) * cfg.tokens * cfg.top_k), where);
    km::EpMoeArgs& a = args[i];
    a.rank = rank;
    a.world = world;
    a.tokens = cfg.tokens;
    a.top_k = cfg.top_k;
    a.experts = cfg.experts;
    a.experts_per_rank = epr;
    a.hidden = cfg.hidden;
    a.cap = cap;
    const PeerWindow& ctrl_w = team.ctrl().peers[i];
    for (int p = 0; p < world; ++p) {
      char* b = static_cast<char*>(sym_->peers[i].at(p, 0));
      a.counts_at[p] = reinterpret_cast<int32_t*>(b + off_counts);
      a.recv_x_at[p] = reinterpret_cast<uint8_t*>(b + off_x);
      a.recv_xs_at[p] = reinterpret_cast<float*>(b + off_xs);
      a.recv_w_at[p] = reinterpret_cast<float*>(b + off_w);
      a.recv_src_at[p] = reinterpret_cast<int32_t*>(b + off_src);
      a.combine_at[p] = reinterpret_cast<uint16_t*>(b + off_comb);
      uint64_t* f = static_cast<uint64_t*>(ctrl_w.at(p, ctrl_offset));
      a.ready_at_peer[p] = static_cast<uint64_t*>(ctrl_w.at(p, ctrl_offset + sizeof(uint64_t) * rank));
      a.counts_flag_at[p] = f + world;
      a.rows_flag_at[p] = f + world + 1;
      a.combine_flag_at[p] = f + world + 2;
    }
    a.ready = static_cast<const uint64_t*>(ctrl_w.at(rank, ctrl_offset));
    a.row_slot = row_slot_[i];
    const TeamDevice td = team.device_view(i);
    a.status = td.status;
    a.timeout_ns = td.timeout_ns;
  }
}

EpMoeBuffers::~EpMoeBuffers() {
  for (size_t i = 0; i < row_slot_.size(); ++i) {
    cudaSetDevice(team.device(static_cast<int>(i)));
    cudaDeviceSynchronize();
    cudaFree(row_slot_[i]);
  }
  try {
    if (sym_ != nullptr) team.free_symmetric(*sym_);
  } catch (...) {
  }
}

void EpMoeBuffers::check_formats(const EpMoeRankInputs& in) const {
  if (in.quant != MoeQuant::w8a8 && !moe_is_w4a8(in.quant))
    throw InvalidArgument(fmt::format("{}: unknown weight format {}", what_, static_cast<int>(in.quant)));
  const bool rs = in.w_layout != MoeWeightLayout::rows;
  if (rs && !((in.w_layout == MoeWeightLayout::int4_rs_lut && in.quant == MoeQuant::w4a8_int4) ||
              (in.w_layout == MoeWeightLayout::mxfp4_rs && in.quant == MoeQuant::w4a8_mxfp4)))
    throw InvalidArgument(fmt::format("{}: weight layout {} with {} weights (int4_rs_lut takes w4a8_int4, mxfp4_rs "
                                      "w4a8_mxfp4; the glu layouts are not layer layouts)",
                                      what_, moe_weight_layout_name(in.w_layout), moe_quant_name(in.quant)));
  if (in.act != MoeActScales::per_128 && in.act != MoeActScales::per_token)
    throw InvalidArgument(fmt::format("{}: unknown activation scales {}", what_, static_cast<int>(in.act)));
  if (in.act == MoeActScales::per_token && !rs)
    throw InvalidArgument(fmt::format("{}: per-token activation scales run the register-operand kernels: weights in "
                                      "the int4_rs_lut or mxfp4_rs layout (got rows)", what_));
}

km::EpMoeArgs EpMoeBuffers::next_call(int i, const EpMoeRankInputs& in) {
  auto need = [&](const void* p, size_t align, const char* name) {
    if (p == nullptr) throw InvalidArgument(fmt::format("{}: {} is null", what_, name));
    if (reinterpret_cast<uintptr_t>(p) % align)
      throw InvalidArgument(fmt::format("{}: {} must be {}-byte aligned", what_, name, align));
  };
  need(in.topk_experts, 4, "topk_experts");
  need(in.topk_weights, 4, "topk_weights");
  need(in.x, 16, "x");
  need(in.x_scales, 4, "x_scales");
  need(in.w1, 16, "w1");
  need(in.w2, 16, "w2");
  check_formats(in);
  const bool rs = in.w_layout != MoeWeightLayout::rows;
  if (in.quant == MoeQuant::w4a8_mxfp4 && !rs) {  // E8M0 exponents instead of fp32 scales (bulk-copied)
    need(in.w1_e8m0, 16, "w1_e8m0");
    need(in.w2_e8m0, 16, "w2_e8m0");
  } else {
    // INT4 group scales and register-operand MXFP4 block scales are bulk-copied.
    const size_t sa = in.quant == MoeQuant::w8a8 || in.w_layout == MoeWeightLayout::int4_rs_lut ? 4 : 16;
    need(in.w1_scales, sa, "w1_scales");
    need(in.w2_scales, sa, "w2_scales");
  }
  need(in.out, 16, "out");
  km::EpMoeArgs a = args.at(i);
  a.epoch = ++args[i].epoch;
  a.topk_experts = in.topk_experts;
  a.topk_weights = in.topk_weights;
  a.x = static_cast<const uint8_t*>(in.x);
  a.x_scales = in.x_scales;
  a.out = static_cast<uint16_t*>(in.out);
  return a;
}

}  // namespace xstage::ops
