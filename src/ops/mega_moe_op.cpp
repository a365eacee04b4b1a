// The Mega-MoE layer operator (include/xstage/ops/mega_moe.hpp): the shared expert-parallel
// buffers, this kernel's local scratch and counters, the model's interleaved mix, one
// cooperative launch per call (src/kernels/moe/mega_launch.cuh; one instantiation per tile
// configuration, xstage/mega_tile.hpp).
#include "xstage/ops/mega_moe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "kernels/moe/mega_launch.hpp"
#include "ops/ep_moe_buffers.hpp"
#include "ops/mega_moe_trace.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"

namespace xstage::ops {
namespace km = kernels::moe;

struct MegaMoeLayer::Impl {
  EpMoeBuffers buf;
  moe::MoeSchedulePlan plan;
  int n1 = 0, n2 = 0, max_blocks = 0;
  moe::MegaTile auto_tile = moe::MegaTile::m64n256;  // MegaTile::automatic resolves to this
  moe::MoeOrderChoice order;                         // MoeSchedule::automatic resolves to order.schedule
  moe::MoeOrderChoice order_w4a8;                    // the same with W4A8 weights (interleaved)
  moe::MegaTile tok_tile = moe::MegaTile::m256n128_tok;  // per-token calls' automatic tile
  size_t tok_max_tiles = 0;  // list positions of a per-token call (either per-token tile)
  // The trace holds a record per list position of any configuration's call.
  size_t max_tiles() const { return std::max(size_t(max_blocks) * (n1 + n2), tok_max_tiles); }
  struct Rank {
    km::MegaMoeArgs m;
    bool spans_recorded = false;
  };
  std::vector<Rank> ranks;
  Impl(Team& t, const EpMoeConfig& c) : buf(t, c, "mega moe") {}
};

MegaMoeLayer::MegaMoeLayer(Team& team, const EpMoeConfig& cfg, const model::Params& model, double tile_tflops,
                           int ctas, bool per_token_scratch)
    : impl_(std::make_unique<Impl>(team, cfg)) {
  Impl& I = *impl_;
  if (ctas < 0) throw InvalidArgument(fmt::format("mega moe: ctas {} must be >= 0", ctas));
  if (per_token_scratch && !km::mega_moe_w4a8_tok_built())
    throw InvalidArgument("mega moe: per_token_scratch asks for the per-token W4A8 kernel, which this build leaves "
                          "out (configure with -DXSTAGE_MEGA_W4A8_TOK=ON)");
  if (ctas > 0)
    for (int& s : I.buf.sm_count) s = std::min(s, ctas);
  if (I.buf.epr > km::kMegaMaxLocalExperts)
    throw InvalidArgument(fmt::format("mega moe: {} experts per rank exceed the kernel's {}", I.buf.epr,
                                      km::kMegaMaxLocalExperts));
  I.auto_tile = moe::choose_mega_tile(static_cast<long long>(cfg.tokens) * team.world_size() * cfg.top_k, cfg.experts);
  // Tiles per block are the same for every tile configuration (128 h / 256 hidden channels);
  // the scratch is sized for the smallest block (the most blocks).
  const moe::MegaTileShape smallest = moe::mega_tile_shape(moe::MegaTile::m64n256);
  I.n1 = moe::mega_l1_tiles(smallest, cfg.intermediate);
  I.n2 = moe::mega_l2_tiles(smallest, cfg.hidden);
  for (int t = 0; t < moe::kMegaTileCount; ++t) {
    const moe::MegaTileShape sh = moe::mega_tile_shape(static_cast<moe::MegaTile>(t));
    if (moe::mega_l1_tiles(sh, cfg.intermediate) != I.n1 || moe::mega_l2_tiles(sh, cfg.hidden) != I.n2 ||
        sh.block_m < smallest.block_m)
      throw Error("mega moe: the tile configurations disagree on the scratch layout");
  }
  I.max_blocks = moe::mega_max_blocks(I.buf.cap, I.buf.epr, smallest.block_m);
  for (moe::MegaTile t : {moe::MegaTile::m256n128_tok, moe::MegaTile::m128n256_tok}) {
    // The per-token kernel's blocks hold at least as many rows (no more blocks, so its counters and
    // spans fit the 64-row layout's); the 256-row tile has more tiles per block (the trace is
    // sized for every tile).
    const moe::MegaTileShape tok = moe::mega_tile_shape(t);
    if (tok.block_m < smallest.block_m || moe::mega_l2_tiles(tok, cfg.hidden) > I.n2 * 2)
      throw Error("mega moe: a per-token tile does not fit the scratch layout");
    I.tok_max_tiles = std::max(I.tok_max_tiles, size_t(moe::mega_max_blocks(I.buf.cap, I.buf.epr, tok.block_m)) *
                                                    (moe::mega_l1_tiles(tok, cfg.intermediate) +
                                                     moe::mega_l2_tiles(tok, cfg.hidden)));
  }
  // A rank's CTAs (rank 0's; H100 / H200 SM count where the team has no local rank) for the tile
  // choice and the schedule plan.
  const int plan_ctas = I.buf.sm_count.empty() ? 132 : I.buf.sm_count[0];
  I.tok_tile = moe::choose_tok_tile(static_cast<long long>(cfg.tokens) * team.world_size() * cfg.top_k, cfg.experts,
                                    I.buf.epr, cfg.hidden, plan_ctas, km::mega_moe_w4a8_tok_wide_built());
  // The interleaved mix depends only on the shape and the model; plan it for a balanced load.
  moe::MoeScheduleInput in;
  in.rows_per_expert.assign(I.buf.epr, std::max(1, I.buf.cap / I.buf.world / I.buf.epr));
  in.hidden = cfg.hidden;
  in.intermediate = cfg.intermediate;
  in.block_m = smallest.block_m;  // the mix and the lead are ratios / CTA rounds: the same for 128 rows
  in.l1_n = smallest.l1_n;
  in.l2_n = smallest.l2_n;
  in.ctas = plan_ctas;
  in.world = I.buf.world;
  in.tile_tflops = tile_tflops;
  I.plan = moe::plan_moe_schedule(model, in, moe::MoeSchedule::interleaved);
  I.plan.tiles.clear();
  {
    // The order for MoeSchedule::automatic: the model's choice for a balanced load (the reuse share
    // expected under balanced random routing), the automatic tile's blocks and the GPU's L2.
    int l2 = 0;
    XS_CUDA(cudaSetDevice(team.device(0)), "mega moe: reading the L2 size");
    XS_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, team.device(0)), "mega moe: reading the L2 size");
    moe::MoeLayerConfig lc;
    lc.hidden = cfg.hidden;
    lc.intermediate = cfg.intermediate;
    lc.experts = cfg.experts;
    lc.top_k = cfg.top_k;
    lc.tokens = cfg.tokens;
    lc.world = I.buf.world;
    lc.ctas = in.ctas;
    lc.tile_tflops = tile_tflops;
    I.order = moe::choose_balanced_layer_order(model, lc, double(l2));
    // W4A8 weights: interleaved (moe::w4a8_layer_order; measured faster at all 60 W4A8
    // configurations, results/megamoe-tiles-h200/sweep-w4a8/).
    I.order_w4a8 = moe::w4a8_layer_order(I.order);
  }

  I.ranks.resize(team.local_count());
  const size_t cap = I.buf.cap;
  for (int i = 0; i < team.local_count(); ++i) {
    km::MegaMoeArgs& m = I.ranks[i].m;
    const std::string where = fmt::format("mega moe: setting up rank {}", team.rank(i));
    XS_CUDA(cudaSetDevice(team.device(i)), where);
    m.ep = I.buf.args[i];
    m.intermediate = cfg.intermediate;
    m.max_blocks = I.max_blocks;
    XS_CUDA(cudaMalloc(&m.hist, sizeof(int32_t) * 2 * cfg.experts), where);
    XS_CUDA(cudaMemset(m.hist, 0, sizeof(int32_t) * 2 * cfg.experts), where);
    XS_CUDA(cudaMalloc(&m.l1_done, sizeof(uint32_t) * 2 * I.max_blocks), where);
    XS_CUDA(cudaMemset(m.l1_done, 0, sizeof(uint32_t) * 2 * I.max_blocks), where);
    XS_CUDA(cudaMalloc(&m.hist_done, sizeof(uint32_t) * 4), where);
    XS_CUDA(cudaMemset(m.hist_done, 0, sizeof(uint32_t) * 4), where);
    m.ctas_done = m.hist_done + 1;
    m.tile_next = m.hist_done + 2;
    XS_CUDA(cudaMalloc(&m.rows_base, sizeof(uint64_t) * 2), where);
    XS_CUDA(cudaMemset(m.rows_base, 0, sizeof(uint64_t) * 2), where);
    XS_CUDA(cudaMalloc(&m.h, cap * cfg.intermediate), where + ": h");
    XS_CUDA(cudaMalloc(&m.h_scales, sizeof(float) * (cfg.intermediate / 128) * cap), where + ": h scales");
    XS_CUDA(cudaMalloc(&m.spans, sizeof(uint32_t) * size_t(I.max_blocks) * I.n2 * 2), where + ": spans");
    XS_CUDA(cudaMalloc(&m.cta_clock, sizeof(uint64_t) * km::kMegaClockWords * I.buf.sm_count[i]), where + ": clocks");
    XS_CUDA(cudaMalloc(&m.trace, sizeof(uint32_t) * km::kMegaTraceWords * I.max_tiles()), where + ": trace");
    XS_CUDA(cudaMalloc(&m.trace_hook, sizeof(uint32_t) * 3 * I.buf.sm_count[i]), where + ": trace");
    m.l1_per_l2 = std::max(1, I.plan.l1_per_l2);
    m.lead = I.plan.lead_tiles;
    if (per_token_scratch) {  // the per-token kernel's bf16 h, per-token maxima (zero; the kernel leaves them
                              // zero) and quantisation claims (zeroed by each call's prologue)
      XS_CUDA(cudaMalloc(&m.h16, sizeof(uint16_t) * cap * cfg.intermediate), where + ": bf16 h");
      XS_CUDA(cudaMalloc(&m.h_amax, sizeof(uint32_t) * cap), where + ": h maxima");
      XS_CUDA(cudaMemset(m.h_amax, 0, sizeof(uint32_t) * cap), where + ": h maxima");
      XS_CUDA(cudaMalloc(&m.h_qclaim, sizeof(uint32_t) * I.max_blocks), where + ": quantisation claims");
    }
    // The zeroed scratch must be in place before the first call's kernel on any stream.
    XS_CUDA(cudaDeviceSynchronize(), where);
  }
}

MegaMoeLayer::~MegaMoeLayer() {
  Impl& I = *impl_;
  for (size_t i = 0; i < I.ranks.size(); ++i) {
    km::MegaMoeArgs& m = I.ranks[i].m;
    cudaSetDevice(I.buf.team.device(static_cast<int>(i)));
    cudaDeviceSynchronize();
    for (void* p : {static_cast<void*>(m.hist), static_cast<void*>(m.l1_done), static_cast<void*>(m.hist_done),
                    static_cast<void*>(m.rows_base), static_cast<void*>(m.h), static_cast<void*>(m.h_scales),
                    static_cast<void*>(m.spans), static_cast<void*>(m.cta_clock), static_cast<void*>(m.trace),
                    static_cast<void*>(m.trace_hook), static_cast<void*>(m.h16), static_cast<void*>(m.h_amax),
                    static_cast<void*>(m.h_qclaim)})
      cudaFree(p);
  }
}

void MegaMoeLayer::forward(int i, const EpMoeRankInputs& in, cudaStream_t s, const MegaMoeOptions& opt) {
  Impl& I = *impl_;
  Impl::Rank& R = I.ranks.at(i);
  // Checked before next_call, which counts the call.
  const bool per_token = in.act == MoeActScales::per_token;
  if (per_token && !km::mega_moe_w4a8_tok_built())
    throw InvalidArgument("mega moe: per-token activation scales run the per-token W4A8 kernel, which this build "
                          "leaves out (configure with -DXSTAGE_MEGA_W4A8_TOK=ON; the unfused EpMoeLayer takes them)");
  if (in.act != MoeActScales::per_128 && !per_token)
    throw InvalidArgument(fmt::format("mega moe: unknown activation scales {}", static_cast<int>(in.act)));
  if (!per_token && in.w_layout != MoeWeightLayout::rows && !km::mega_moe_w4a8_rs_built())
    throw InvalidArgument(fmt::format("mega moe: weight layout {} runs the register-operand W4A8 kernel, which this "
                                      "build leaves out (configure with -DXSTAGE_MEGA_W4A8_RS=ON)",
                                      moe_weight_layout_name(in.w_layout)));
  const moe::MegaTile tile = resolved_tile(opt.tile, in.quant, in.act);
  if (per_token && (R.m.h16 == nullptr || R.m.h_amax == nullptr || R.m.h_qclaim == nullptr))
    throw InvalidArgument("mega moe: a per-token call on a layer constructed without per_token_scratch (the "
                          "per-token kernel's bf16 copy of h is allocated with the layer)");
  const moe::MoeSchedule order = resolved_schedule(opt.schedule, in.quant);
  km::MegaMoeArgs m = R.m;
  m.ep = I.buf.next_call(i, in);
  m.order = order == moe::MoeSchedule::expert_wave ? 0 : 1;
  m.control_local = opt.control_local ? 1 : 0;
  m.dynamic_claim = opt.dynamic_claim ? 1 : 0;
  if (opt.lead_tiles >= 0) m.lead = opt.lead_tiles;
  if (opt.l1_per_l2 > 0) m.l1_per_l2 = opt.l1_per_l2;
  m.tail_l2 = tail_l2_tiles(i, opt);
  const std::string what =
      fmt::format("mega moe (rank {}, call {}, tile {})", m.ep.rank, m.ep.epoch, moe::mega_tile_name(tile));
  if (opt.record_spans) {
    XS_CUDA(cudaMemsetAsync(m.spans, 0, sizeof(uint32_t) * size_t(I.max_blocks) * I.n2 * 2, s), what);
    XS_CUDA(cudaMemsetAsync(m.cta_clock, 0, sizeof(uint64_t) * km::kMegaClockWords * I.buf.sm_count[i], s), what);
    XS_CUDA(cudaMemsetAsync(m.trace, 0xff, sizeof(uint32_t) * km::kMegaTraceWords * I.max_tiles(), s), what);
  } else {
    m.spans = nullptr;
    m.cta_clock = nullptr;
    m.trace = nullptr;
    m.trace_hook = nullptr;
  }
  R.spans_recorded = opt.record_spans;
  km::MegaWeights w;
  w.format = in.quant == MoeQuant::w4a8_int4    ? km::MegaWeightFormat::w4a8_int4
             : in.quant == MoeQuant::w4a8_mxfp4 ? km::MegaWeightFormat::w4a8_mxfp4
                                                : km::MegaWeightFormat::w8a8;
  // The register-operand layouts (checked against the format by next_call): their own kernel;
  // with per-token activations the per-token kernel (W1 in the layout's glu form, as the unfused
  // layer takes it).
  if (in.w_layout == MoeWeightLayout::int4_rs_lut)
    w.format = per_token ? km::MegaWeightFormat::w4a8_int4_lut_tok : km::MegaWeightFormat::w4a8_int4_lut;
  if (in.w_layout == MoeWeightLayout::mxfp4_rs)
    w.format = per_token ? km::MegaWeightFormat::w4a8_mxfp4_tok : km::MegaWeightFormat::w4a8_mxfp4_rs;
  // Per-token: x_scales [T] as given; the kernel's dispatch moves each row's one scale (ep_push_row).
  w.w1 = in.w1;
  w.w1_scales = in.w1_scales;
  w.w2 = in.w2;
  w.w2_scales = in.w2_scales;
  w.w1_e8m0 = in.w1_e8m0;
  w.w2_e8m0 = in.w2_e8m0;
  XS_CUDA(km::mega_moe_launch(tile, m, w, I.buf.sm_count[i], s), what + ": launch");
}

bool MegaMoeLayer::register_operand_w4a8_built() { return km::mega_moe_w4a8_rs_built(); }
bool MegaMoeLayer::per_token_w4a8_built() { return km::mega_moe_w4a8_tok_built(); }
bool MegaMoeLayer::per_token_wide_built() { return km::mega_moe_w4a8_tok_wide_built(); }

moe::MoeSchedule MegaMoeLayer::resolved_schedule(moe::MoeSchedule requested, MoeQuant quant) const {
  if (requested == moe::MoeSchedule::automatic) return order_choice(quant).schedule;
  if (requested != moe::MoeSchedule::expert_wave && requested != moe::MoeSchedule::interleaved)
    throw InvalidArgument(fmt::format("mega moe: unknown schedule {}", static_cast<int>(requested)));
  return requested;
}
const moe::MoeOrderChoice& MegaMoeLayer::order_choice(MoeQuant quant) const {
  return quant == MoeQuant::w8a8 ? impl_->order : impl_->order_w4a8;
}

moe::MegaTile MegaMoeLayer::resolved_tile(moe::MegaTile requested, MoeQuant quant, MoeActScales act) const {
  if (quant != MoeQuant::w8a8 && !moe_is_w4a8(quant))
    throw InvalidArgument(fmt::format("mega moe: unknown weight format {}", static_cast<int>(quant)));
  if (act == MoeActScales::per_token) {
    if (quant == MoeQuant::w8a8)
      throw InvalidArgument("mega moe: per-token activations run W4A8 weights only (w4a8_int4 or w4a8_mxfp4 in a "
                            "register-operand layout)");
    if (requested == moe::MegaTile::automatic) return impl_->tok_tile;
    if (!moe::mega_tile_is_tok(requested))
      throw InvalidArgument(fmt::format("mega moe: per-token activations run the per-token tiles only "
                                        "(m256n128_tok, m128n256_tok; asked for {})",
                                        moe::mega_tile_name(requested)));
    if (requested == moe::MegaTile::m128n256_tok && !per_token_wide_built())
      throw InvalidArgument("mega moe: the wide per-token tile m128n256_tok is left out of this build (configure with "
                            "-DXSTAGE_MEGA_TOK_WIDE=ON)");
    return requested;
  }
  if (moe::mega_tile_is_tok(requested))
    throw InvalidArgument(fmt::format("mega moe: {} is a per-token tile (per-token W4A8 activations only)",
                                      moe::mega_tile_name(requested)));
  const bool w4 = quant != MoeQuant::w8a8;
  if (requested == moe::MegaTile::automatic) return w4 ? moe::MegaTile::m64n256 : impl_->auto_tile;
  if (requested != moe::MegaTile::m64n256 && requested != moe::MegaTile::m128n256)
    throw InvalidArgument(fmt::format("mega moe: unknown tile configuration {}", static_cast<int>(requested)));
  if (w4 && requested != moe::MegaTile::m64n256)
    throw InvalidArgument(fmt::format("mega moe: W4A8 weights run the 64 x 256 tile only (asked for {})",
                                      moe::mega_tile_name(requested)));
  return requested;
}


MegaMoeSpans MegaMoeLayer::last_spans(int i) const {
  const Impl& I = *impl_;
  const Impl::Rank& R = I.ranks.at(i);
  if (!R.spans_recorded) throw InvalidArgument("mega moe: the last call did not record spans (record_spans)");
  XS_CUDA(cudaSetDevice(I.buf.team.device(i)), "mega moe: spans");
  std::vector<uint32_t> cyc(size_t(I.max_blocks) * I.n2 * 2);
  std::vector<uint64_t> clk(size_t(km::kMegaClockWords) * I.buf.sm_count[i]);
  XS_CUDA(cudaMemcpy(cyc.data(), R.m.spans, cyc.size() * 4, cudaMemcpyDeviceToHost), "mega moe: spans");
  XS_CUDA(cudaMemcpy(clk.data(), R.m.cta_clock, clk.size() * 8, cudaMemcpyDeviceToHost), "mega moe: clocks");
  MegaMoeSpans out;
  std::vector<double> ghz;
  for (size_t c = 0; c + km::kMegaClockWords <= clk.size(); c += km::kMegaClockWords) {
    if (clk[c + 3] <= clk[c + 1] || clk[c + 2] <= clk[c]) continue;
    ghz.push_back(double(clk[c + 2] - clk[c]) / double(clk[c + 3] - clk[c + 1]));
    out.kernel_us = std::max(out.kernel_us, double(clk[c + 3] - clk[c + 1]) / 1e3);
  }
  if (ghz.empty()) throw Error("mega moe: the call recorded no clocks");
  std::nth_element(ghz.begin(), ghz.begin() + ghz.size() / 2, ghz.end());
  out.sm_ghz = ghz[ghz.size() / 2];
  for (uint32_t c : cyc)
    if (c != 0) out.us.push_back(c / out.sm_ghz / 1e3);
  std::vector<uint32_t> tr(km::kMegaTraceWords * I.max_tiles());
  XS_CUDA(cudaMemcpy(tr.data(), R.m.trace, tr.size() * 4, cudaMemcpyDeviceToHost), "mega moe: trace");
  out.tiles = summarize_mega_trace(tr, clk, out.sm_ghz);
  return out;
}

const moe::MoeSchedulePlan& MegaMoeLayer::plan() const { return impl_->plan; }
int MegaMoeLayer::ctas(int i) const { return impl_->buf.sm_count.at(i); }
// Automatic: the plan's choice (one round of Linear-2 tiles at the end where they are the longer
// tiles), with this rank's CTA count.
int MegaMoeLayer::tail_l2_tiles(int i, const MegaMoeOptions& opt) const {
  return opt.tail_l2_tiles >= 0 ? opt.tail_l2_tiles : impl_->plan.tail_l2_tiles > 0 ? ctas(i) : 0;
}

}  // namespace xstage::ops
