// Ulysses attention operator: validation, buffers, the four variants, the shaping plan.
// No device code here: kernels are reached through kernels/ulysses/launch.hpp and the plain
// attention operator.
#include "xstage/ops/ulysses.hpp"

#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention/launch.hpp"
#include "kernels/ulysses/launch.hpp"
#include "ops/attention_params.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"

namespace xstage::ops {

namespace ku = kernels::ulysses;
namespace ka = kernels::attention;

const char* variant_name(UlyssesVariant v) {
  switch (v) {
    case UlyssesVariant::serial: return "serial";
    case UlyssesVariant::comm_sm: return "comm-sm";
    case UlyssesVariant::fused: return "fused";
    case UlyssesVariant::fused_shaped: return "fused-shaped";
  }
  return "unknown";
}

UlyssesVariant parse_variant(const std::string& s) {
  for (auto v : {UlyssesVariant::serial, UlyssesVariant::comm_sm, UlyssesVariant::fused, UlyssesVariant::fused_shaped})
    if (s == variant_name(v)) return v;
  throw InvalidArgument(
      fmt::format("ulysses: unknown variant '{}' (serial, comm-sm, fused, fused-shaped)", s));
}

void validate_ulysses(const UlyssesConfig& c, int world) {
  if (world < 2 || world > ku::kMaxRanks)
    throw InvalidArgument(fmt::format("ulysses: needs 2..{} ranks, the team has {}", ku::kMaxRanks, world));
  if (c.dtype != AttentionDType::bf16 && c.dtype != AttentionDType::fp16)
    throw InvalidArgument(fmt::format("ulysses: unsupported dtype {} (bf16 or fp16)", static_cast<int>(c.dtype)));
  if (c.head_dim != 64 && c.head_dim != 128)
    throw InvalidArgument(fmt::format("ulysses: head dim {} is not supported (64 or 128)", c.head_dim));
  if (c.batch <= 0 || c.seq_len <= 0 || c.heads <= 0)
    throw InvalidArgument(fmt::format("ulysses: sizes must be positive (batch {}, seq_len {}, heads {})", c.batch,
                                      c.seq_len, c.heads));
  if (c.heads % world != 0)
    throw InvalidArgument(fmt::format("ulysses: {} heads cannot be split over {} ranks (heads % ranks must be 0)",
                                      c.heads, world));
  if (c.seq_len % world != 0)
    throw InvalidArgument(fmt::format(
        "ulysses: sequence length {} is not divisible by {} ranks; uneven shards are not supported - pad the "
        "sequence to a multiple of the rank count",
        c.seq_len, world));
  if (!(std::isfinite(c.softmax_scale) && c.softmax_scale >= 0.f))
    throw InvalidArgument(fmt::format("ulysses: softmax scale {} must be finite and >= 0 (0 = 1/sqrt(d))",
                                      c.softmax_scale));
  const long long out_elems = static_cast<long long>(c.batch) * c.seq_len * c.heads * c.head_dim;
  if (out_elems / world > std::numeric_limits<int>::max())
    throw InvalidArgument(fmt::format("ulysses: {} output elements per rank exceed the kernels' range", out_elems / world));
}

namespace {

constexpr size_t kElem = 2;

void check_input(const char* name, const void* p) {
  if (p == nullptr) throw InvalidArgument(fmt::format("ulysses: {} is a null pointer", name));
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw InvalidArgument(fmt::format("ulysses: {} = {} is not 16-byte aligned", name, p));
}

}  // namespace

struct UlyssesAttention::Impl {
  Team& team;
  UlyssesConfig cfg;
  UlyssesOptions opts;
  int world = 0;
  int rows_per_rank = 0;
  int heads_local = 0;
  ka::TileConfig tile{};
  int num_m_blocks = 0;
  SymmetricBuffer* out = nullptr;
  size_t ctrl_offset = 0;  // [counter][ready x world], uint64 each

  struct Rank {
    void* scratch = nullptr;  // [B, S, H/P, D]: serial, comm-sm, attention_only
    void* recv = nullptr;     // [B, P, S/P, H/P, D]: serial
    uint64_t* slice_flags = nullptr;
    uint64_t* spans = nullptr;
    cudaStream_t side = nullptr;  // comm-sm copier stream
    cudaEvent_t fork = nullptr, join = nullptr;
    ku::UlyssesArgs args;  // pointers resolved once; epoch etc. set per call
    uint64_t epoch = 0;
    int sm_count = 0;
    bool planned = false;
    model::UlyssesPlan plan;
  };
  std::vector<Rank> ranks;

  Impl(Team& t, const UlyssesConfig& c, const UlyssesOptions& o) : team(t), cfg(c), opts(o) {}

  size_t scratch_bytes() const {
    return static_cast<size_t>(cfg.batch) * cfg.seq_len * heads_local * cfg.head_dim * kElem;
  }
  uint64_t rows_per_call() const { return static_cast<uint64_t>(cfg.batch) * rows_per_rank * cfg.heads; }

  AttentionArgs attention_args(const void* q, const void* k, const void* v, void* o) const {
    AttentionArgs a;
    a.dtype = cfg.dtype;
    a.batch = cfg.batch;
    a.heads = heads_local;
    a.q_len = a.kv_len = cfg.seq_len;
    a.head_dim = cfg.head_dim;
    // The fused kernels' tile: every variant runs one mainloop (the long-key tile unsplit, as
    // the fused kernels run it).
    a.tile_policy = opts.tile;
    a.tail_split = false;
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.q_strides = a.k_strides = a.v_strides = a.o_strides = packed_bshd(cfg.seq_len, heads_local, cfg.head_dim);
    a.softmax_scale = cfg.softmax_scale;
    return a;
  }

  bool long_kv() const { return opts.tile == AttentionTilePolicy::long_kv; }

  cudaError_t launch_attention(ku::EpilogueKind kind, const ka::AttentionParams& p, const ku::UlyssesArgs& u,
                               cudaStream_t s) const {
    const bool bf = cfg.dtype == AttentionDType::bf16;
    if (cfg.head_dim == 128)
      return bf ? ku::attention_bf16_d128(kind, p, u, long_kv(), s) : ku::attention_fp16_d128(kind, p, u, long_kv(), s);
    return bf ? ku::attention_bf16_d64(kind, p, u, false, s) : ku::attention_fp16_d64(kind, p, u, false, s);
  }
};

UlyssesAttention::UlyssesAttention(Team& team, const UlyssesConfig& cfg, const UlyssesOptions& opts)
    : impl_(std::make_unique<Impl>(team, cfg, opts)) {
  Impl& I = *impl_;
  I.world = team.world_size();
  validate_ulysses(cfg, I.world);
  model::check_params(opts.model);
  if (opts.comm_ctas < 0) throw InvalidArgument(fmt::format("ulysses: comm_ctas {} must be >= 0", opts.comm_ctas));
  if (opts.chunk_vecs < 0) throw InvalidArgument(fmt::format("ulysses: chunk_vecs {} must be >= 0", opts.chunk_vecs));
  if (opts.tile != AttentionTilePolicy::staged && opts.tile != AttentionTilePolicy::long_kv)
    throw InvalidArgument("ulysses: the tile must be staged or long_kv");
  if (opts.tile == AttentionTilePolicy::long_kv && cfg.head_dim != 128)
    throw InvalidArgument(fmt::format("ulysses: the long_kv tile is d = 128; head dim is {}", cfg.head_dim));
  I.rows_per_rank = cfg.seq_len / I.world;
  I.heads_local = cfg.heads / I.world;
  I.tile = opts.tile == AttentionTilePolicy::long_kv ? ka::long_kv_tile_config() : ka::tile_config(cfg.head_dim);
  I.num_m_blocks = (cfg.seq_len + I.tile.block_m - 1) / I.tile.block_m;
  // The per-rank attention problem must be one the kernel takes (sizes, tile count).
  {
    alignas(16) static const char dummy[16] = {};
    validate(I.attention_args(dummy, dummy, dummy, const_cast<char*>(dummy)));
  }
  const size_t out_bytes = static_cast<size_t>(cfg.batch) * I.rows_per_rank * cfg.heads * cfg.head_dim * kElem;
  I.out = &team.alloc_symmetric(out_bytes);
  I.ctrl_offset = team.reserve_ctrl(sizeof(uint64_t) * (1 + I.world));

  I.ranks.resize(team.local_count());
  for (int i = 0; i < team.local_count(); ++i) {
    Impl::Rank& R = I.ranks[i];
    const std::string where = fmt::format("ulysses: setting up rank {}", team.rank(i));
    XS_CUDA(cudaSetDevice(team.device(i)), where);
    R.sm_count = team.sm_count(i);  // the rank's SMs: the whole GPU, or its virtual partition
    XS_CUDA(cudaMalloc(&R.scratch, I.scratch_bytes()), where + ": scratch");
    XS_CUDA(cudaMalloc(&R.recv, I.scratch_bytes()), where + ": receive buffer");
    ku::UlyssesArgs& u = R.args;
    u.rank = team.rank(i);
    u.world = I.world;
    u.batch = cfg.batch;
    u.rows_per_rank = I.rows_per_rank;
    u.heads_local = I.heads_local;
    u.head_dim = cfg.head_dim;
    u.block_m = I.tile.block_m;
    u.num_m_blocks = I.num_m_blocks;
    u.consumer_wgs = I.tile.consumer_warpgroups;
    const size_t slices = static_cast<size_t>(u.num_slices());
    XS_CUDA(cudaMalloc(&R.slice_flags, slices * sizeof(uint64_t)), where + ": slice flags");
    XS_CUDA(cudaMemset(R.slice_flags, 0, slices * sizeof(uint64_t)), where);
    XS_CUDA(cudaMalloc(&R.spans, slices * sizeof(uint64_t)), where + ": span records");
    R.side = team.create_stream(i);
    XS_CUDA(cudaEventCreateWithFlags(&R.fork, cudaEventDisableTiming), where);
    XS_CUDA(cudaEventCreateWithFlags(&R.join, cudaEventDisableTiming), where);
    const PeerWindow& outs = I.out->peers[i];
    const PeerWindow& ctrl = team.ctrl().peers[i];
    for (int p = 0; p < I.world; ++p) {
      u.out[p] = outs.at(p, 0);
      u.counter[p] = static_cast<uint64_t*>(ctrl.at(p, I.ctrl_offset));
      u.ready_at_peer[p] = static_cast<uint64_t*>(ctrl.at(p, I.ctrl_offset + sizeof(uint64_t) * (1 + u.rank)));
    }
    u.ready = static_cast<const uint64_t*>(ctrl.at(u.rank, I.ctrl_offset)) + 1;
    const TeamDevice td = team.device_view(i);
    u.status = td.status;
    u.timeout_ns = td.timeout_ns;
    u.slice_flags = R.slice_flags;
  }
}

UlyssesAttention::~UlyssesAttention() {
  Impl& I = *impl_;
  for (size_t i = 0; i < I.ranks.size(); ++i) {
    auto& R = I.ranks[i];
    cudaSetDevice(I.team.device(static_cast<int>(i)));
    cudaDeviceSynchronize();
    cudaFree(R.scratch);
    cudaFree(R.recv);
    cudaFree(R.slice_flags);
    cudaFree(R.spans);
    if (R.side) cudaStreamDestroy(R.side);
    if (R.fork) cudaEventDestroy(R.fork);
    if (R.join) cudaEventDestroy(R.join);
  }
  try {
    I.team.free_symmetric(*I.out);
  } catch (...) {
  }
}

const UlyssesConfig& UlyssesAttention::config() const { return impl_->cfg; }
void* UlyssesAttention::output(int i) const { return impl_->out->local.at(i); }
size_t UlyssesAttention::output_bytes() const { return impl_->out->bytes; }
size_t UlyssesAttention::input_elems() const { return impl_->scratch_bytes() / kElem; }

void UlyssesAttention::attention_only(int i, const void* q, const void* k, const void* v, cudaStream_t stream) {
  Impl& I = *impl_;
  AttentionArgs a = I.attention_args(q, k, v, I.ranks.at(i).scratch);
  a.num_ctas = I.ranks.at(i).sm_count;
  attention_forward(a, stream);
}

const model::UlyssesPlan& UlyssesAttention::plan(int i, const void* q, const void* k, const void* v,
                                                 cudaStream_t stream) {
  Impl& I = *impl_;
  Impl::Rank& R = I.ranks.at(i);
  if (R.planned) return R.plan;
  // Measure the attention alone: the step time the model needs is the kernel's own pace.
  cudaEvent_t a = nullptr, b = nullptr;
  XS_CUDA(cudaEventCreate(&a), "ulysses plan: timing");
  XS_CUDA(cudaEventCreate(&b), "ulysses plan: timing");
  float best_ms = std::numeric_limits<float>::max();
  for (int rep = 0; rep < 4; ++rep) {
    XS_CUDA(cudaEventRecord(a, stream), "ulysses plan: timing");
    attention_only(i, q, k, v, stream);
    XS_CUDA(cudaEventRecord(b, stream), "ulysses plan: timing");
    XS_CUDA(cudaEventSynchronize(b), "ulysses plan: timing the attention");
    float ms = 0;
    XS_CUDA(cudaEventElapsedTime(&ms, a, b), "ulysses plan: timing");
    if (rep > 0) best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const double attention_us = best_ms * 1e3;
  const long long tiles = static_cast<long long>(I.num_m_blocks) * I.heads_local * I.cfg.batch;
  const int ctas = static_cast<int>(std::min<long long>(R.sm_count, tiles));
  const int n_blocks = (I.cfg.seq_len + I.tile.block_n - 1) / I.tile.block_n;
  const double waves = std::max(1.0, static_cast<double>(tiles) / ctas);
  model::UlyssesPlanInput in;
  in.world = I.world;
  in.ctas = ctas;
  in.consumer_wgs = I.tile.consumer_warpgroups;
  in.slice_bytes = 64LL * I.cfg.head_dim * static_cast<long long>(kElem);
  in.wg_bytes_per_vec = 128 * 16;
  in.steps_per_tile = n_blocks - 1;  // the step hook runs at every key block but the first
  in.step_us = attention_us / waves / n_blocks;
  in.attention_us = attention_us;
  in.remote_bytes = static_cast<long long>(I.scratch_bytes()) * (I.world - 1) / I.world;
  in.sm_count = R.sm_count;
  R.plan = model::plan_ulysses(I.opts.model, in);
  if (I.opts.chunk_vecs > 0) {  // forced chunks: one every step
    const long long vecs_per_slice = in.slice_bytes / in.wg_bytes_per_vec;
    R.plan.chunk_vecs = I.opts.chunk_vecs;
    R.plan.chunks_per_slice = static_cast<int>((vecs_per_slice + R.plan.chunk_vecs - 1) / R.plan.chunk_vecs);
    R.plan.chunk_every = 1;
  }
  if (I.opts.comm_ctas > 0) R.plan.comm_ctas = I.opts.comm_ctas;
  R.planned = true;
  return R.plan;
}

void UlyssesAttention::forward(int i, const void* q, const void* k, const void* v, UlyssesVariant variant,
                               cudaStream_t s) {
  Impl& I = *impl_;
  Impl::Rank& R = I.ranks.at(i);
  check_input("q", q);
  check_input("k", k);
  check_input("v", v);
  const std::string what = fmt::format("ulysses {} (rank {}, S {}, H {}, D {})", variant_name(variant),
                                       I.team.rank(i), I.cfg.seq_len, I.cfg.heads, I.cfg.head_dim);
  if (variant == UlyssesVariant::fused_shaped && I.long_kv())
    throw InvalidArgument("ulysses: fused-shaped runs the staged tile only (the long_kv tile has no staged slice)");
  if (variant == UlyssesVariant::serial) {
    attention_only(i, q, k, v, s);
    const size_t chunk = static_cast<size_t>(I.rows_per_rank) * I.heads_local * I.cfg.head_dim;  // elements
    const size_t per_batch = chunk * I.world;
    for (int b = 0; b < I.cfg.batch; ++b)
      I.team.all_to_all(i, static_cast<char*>(R.scratch) + b * per_batch * kElem,
                        static_cast<char*>(R.recv) + b * per_batch * kElem, chunk * kElem, s);
    XS_CUDA(ku::launch_permute_received(R.recv, I.out->local[i], I.cfg.batch, I.world, I.rows_per_rank,
                                           I.heads_local, I.cfg.head_dim, s),
               what + ": permute");
    return;
  }

  ku::UlyssesArgs u = R.args;
  u.epoch = ++R.epoch;
  // Only comm-sm (copier CTAs) and fused-shaped (chunking) use the plan; making it times the
  // attention synchronously, so fused never pays for it.
  if (variant == UlyssesVariant::comm_sm || variant == UlyssesVariant::fused_shaped) {
    const model::UlyssesPlan& plan = this->plan(i, q, k, v, s);
    u.chunk_vecs = plan.chunk_vecs;
    u.chunk_shift = 0;
    while ((2 << u.chunk_shift) <= plan.chunk_every) ++u.chunk_shift;  // chunk_every is a power of two
    u.chunk_calls = ((plan.chunks_per_slice - 1) << u.chunk_shift) + 1;
  }
  u.expect_rows = u.epoch * I.rows_per_call();
  u.spans = I.opts.record_spans ? R.spans : nullptr;
  if (u.spans) XS_CUDA(cudaMemsetAsync(R.spans, 0, sizeof(uint64_t) * u.num_slices(), s), what);
  AttentionArgs a = I.attention_args(q, k, v, R.scratch);
  a.num_ctas = R.sm_count;
  ka::AttentionParams p = to_kernel_params(a);

  if (variant == UlyssesVariant::comm_sm) {
    const int comm = std::min(R.plan.comm_ctas, R.sm_count - 1);
    p.num_ctas = R.sm_count - comm;
    // The attention takes SMs - comm CTAs (one per SM); the copier, launched right after on
    // its own stream, lands on the SMs left free. (Launched the other way round, the
    // attention's CTAs were not scheduled while the copier spun - seen on H200.)
    XS_CUDA(cudaEventRecord(R.fork, s), what);
    XS_CUDA(cudaStreamWaitEvent(R.side, R.fork), what);
    XS_CUDA(I.launch_attention(ku::EpilogueKind::flagged_local, p, u, s), what + ": attention");
    XS_CUDA(ku::launch_tile_copier(u, R.scratch, I.cfg.seq_len, comm, R.side), what + ": tile copier");
    XS_CUDA(cudaEventRecord(R.join, R.side), what);
    XS_CUDA(cudaStreamWaitEvent(s, R.join), what);
  } else {
    const auto kind = variant == UlyssesVariant::fused ? ku::EpilogueKind::fused : ku::EpilogueKind::fused_shaped;
    XS_CUDA(I.launch_attention(kind, p, u, s), what + ": attention");
  }
  // No wait kernel: CTA 0 of the attention (fused) or of the copier (comm-sm) waits for this
  // rank's shard before it ends, so the call is complete when the stream passes it.
}

void UlyssesAttention::set_record_spans(bool on) { impl_->opts.record_spans = on; }

std::vector<SliceSpan> UlyssesAttention::read_spans(int i) {
  Impl& I = *impl_;
  Impl::Rank& R = I.ranks.at(i);
  const ku::UlyssesArgs& u = R.args;
  std::vector<uint64_t> cycles(u.num_slices());
  XS_CUDA(cudaMemcpy(cycles.data(), R.spans, cycles.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
             "ulysses: reading span records");
  std::vector<SliceSpan> out;
  out.reserve(cycles.size());
  for (int s = 0; s < u.num_slices(); ++s) {
    const int wg = s % u.consumer_wgs;
    const int m_block = (s / u.consumer_wgs) % u.num_m_blocks;
    const int row_begin = m_block * u.block_m + wg * 64;
    const int row_end = std::min(row_begin + 64, I.cfg.seq_len);
    if (row_begin >= row_end) continue;
    out.push_back(SliceSpan{cycles[s], row_begin / I.rows_per_rank, row_end - row_begin});
  }
  return out;
}

}  // namespace xstage::ops
