// Attention forward operator: validation, choice of the compiled instantiation, launch.
// No device code here: the kernels are reached through kernels/attention/launch.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "kernels/attention/launch.hpp"
#include "kernels/attention/tile_rules.hpp"
#include "ops/attention_params.hpp"
#include "ops/attention_workspace.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/attention.hpp"

namespace xstage::ops {

namespace ka = kernels::attention;

const char* dtype_name(AttentionDType t) {
  switch (t) {
    case AttentionDType::bf16: return "bf16";
    case AttentionDType::fp16: return "fp16";
  }
  return "unknown";
}

BSHDStrides packed_bshd(int seq, int heads, int head_dim) {
  BSHDStrides s;
  s.d = 1;
  s.h = head_dim;
  s.s = static_cast<int64_t>(heads) * head_dim;
  s.b = static_cast<int64_t>(seq) * heads * head_dim;
  return s;
}

namespace {

constexpr int64_t kElemBytes = 2;                // bf16 and fp16
constexpr int64_t kMaxStrideBytes = 1ll << 40;   // TMA descriptor limit

bool aligned(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

void check_pointer(const char* name, const void* p) {
  if (p == nullptr) throw InvalidArgument(fmt::format("attention: {} is a null pointer", name));
  if (!aligned(p, 16))
    throw InvalidArgument(fmt::format("attention: {} = {} is not 16-byte aligned (TMA needs 16 B)", name, p));
}

// extent: how many positions the stride steps over (a stride of an extent-1 mode is unused).
void check_stride(const char* tensor, const char* mode, int64_t stride, int64_t extent) {
  if (extent <= 1) return;  // never used (replaced by usable_stride)
  if (stride <= 0 || stride % 8 != 0)
    throw InvalidArgument(fmt::format(
        "attention: {} {}-stride {} must be a positive multiple of 8 elements (16 bytes, TMA alignment)", tensor, mode,
        stride));
  if (stride * kElemBytes >= kMaxStrideBytes)
    throw InvalidArgument(fmt::format("attention: {} {}-stride {} elements exceeds the TMA limit of 2^40 bytes",
                                      tensor, mode, stride));
}

void check_tensor(const char* name, const BSHDStrides& st, int batch, int seq, int heads) {
  if (st.d != 1)
    throw InvalidArgument(fmt::format("attention: {} head-dim stride is {}, must be 1 (contiguous head dim)", name, st.d));
  check_stride(name, "batch", st.b, batch);
  check_stride(name, "seq", st.s, seq);
  check_stride(name, "head", st.h, heads);
}

// Strides of unit extents are never used to address anything; give them a value every
// consumer (TMA descriptors included) accepts.
int64_t usable_stride(int64_t stride, int64_t extent) { return extent <= 1 ? 8 : stride; }

using LaunchFn = cudaError_t (*)(const ka::AttentionParams&, cudaStream_t);

enum class EntryTile { staged, long_kv, rows128, split, partial, rows64 };

struct Entry {
  AttentionDType dtype;
  int head_dim;
  bool causal;
  // staged: tile_config(); long_kv: long_kv_tile_config(), from kLongKvThreshold keys on (automatic
  // policy); rows128: rows128_d64_tile_config(), automatic by whole waves or asked for; split:
  // split_tile_config(d), only when asked for; partial: the staged d = 64 tile with idle groups and
  // partial tiles last (kernels/attention/kernel.cuh PartialTilesKernel), automatic where
  // tile_rules.hpp partial_tiles_pay holds and the 128-row tile does not win, or asked for; rows64:
  // rows64_tile_config(d), key groups: d = 64 causal and non-causal and non-causal d = 128 (automatic
  // by the busiest CTA, tile_rules.hpp).
  EntryTile tile;
  const char* name;
  LaunchFn launch;
  ka::KernelInfo (*info)();
};
// Whether the entry's epilogue may split the last wave (a workspace is needed).
bool splits_tail(const Entry& e) { return e.tile == EntryTile::long_kv || e.tile == EntryTile::split; }

const Entry kEntries[] = {
    {AttentionDType::bf16, 64, false, EntryTile::staged, "bf16_d64_noncausal", ka::attention_fwd_bf16_d64_noncausal,
     ka::attention_fwd_bf16_d64_info},
    {AttentionDType::bf16, 64, true, EntryTile::staged, "bf16_d64_causal", ka::attention_fwd_bf16_d64_causal,
     ka::attention_fwd_bf16_d64_info},
    {AttentionDType::bf16, 128, false, EntryTile::staged, "bf16_d128_noncausal", ka::attention_fwd_bf16_d128_noncausal,
     ka::attention_fwd_bf16_d128_info},
    {AttentionDType::bf16, 128, true, EntryTile::staged, "bf16_d128_causal", ka::attention_fwd_bf16_d128_causal,
     ka::attention_fwd_bf16_d128_info},
    {AttentionDType::fp16, 64, false, EntryTile::staged, "fp16_d64_noncausal", ka::attention_fwd_fp16_d64_noncausal,
     ka::attention_fwd_fp16_d64_info},
    {AttentionDType::fp16, 64, true, EntryTile::staged, "fp16_d64_causal", ka::attention_fwd_fp16_d64_causal,
     ka::attention_fwd_fp16_d64_info},
    {AttentionDType::fp16, 128, false, EntryTile::staged, "fp16_d128_noncausal", ka::attention_fwd_fp16_d128_noncausal,
     ka::attention_fwd_fp16_d128_info},
    {AttentionDType::fp16, 128, true, EntryTile::staged, "fp16_d128_causal", ka::attention_fwd_fp16_d128_causal,
     ka::attention_fwd_fp16_d128_info},
    {AttentionDType::bf16, 128, false, EntryTile::long_kv, "bf16_d128_noncausal_longkv", ka::attention_fwd_bf16_d128_noncausal_longkv,
     ka::attention_fwd_bf16_d128_longkv_info},
    {AttentionDType::fp16, 128, false, EntryTile::long_kv, "fp16_d128_noncausal_longkv", ka::attention_fwd_fp16_d128_noncausal_longkv,
     ka::attention_fwd_fp16_d128_longkv_info},
    {AttentionDType::bf16, 64, false, EntryTile::rows128, "bf16_d64_noncausal_rows128",
     ka::attention_fwd_bf16_d64_noncausal_rows128, ka::attention_fwd_bf16_d64_rows128_info},
    {AttentionDType::bf16, 64, true, EntryTile::rows128, "bf16_d64_causal_rows128", ka::attention_fwd_bf16_d64_causal_rows128,
     ka::attention_fwd_bf16_d64_rows128_info},
    {AttentionDType::fp16, 64, false, EntryTile::rows128, "fp16_d64_noncausal_rows128",
     ka::attention_fwd_fp16_d64_noncausal_rows128, ka::attention_fwd_fp16_d64_rows128_info},
    {AttentionDType::fp16, 64, true, EntryTile::rows128, "fp16_d64_causal_rows128", ka::attention_fwd_fp16_d64_causal_rows128,
     ka::attention_fwd_fp16_d64_rows128_info},
    {AttentionDType::bf16, 64, true, EntryTile::rows64, "bf16_d64_causal_rows64", ka::attention_fwd_bf16_d64_causal_rows64,
     ka::attention_fwd_bf16_d64_rows64_info},
    {AttentionDType::fp16, 64, true, EntryTile::rows64, "fp16_d64_causal_rows64", ka::attention_fwd_fp16_d64_causal_rows64,
     ka::attention_fwd_fp16_d64_rows64_info},
    {AttentionDType::bf16, 64, false, EntryTile::rows64, "bf16_d64_noncausal_rows64",
     ka::attention_fwd_bf16_d64_noncausal_rows64, ka::attention_fwd_bf16_d64_rows64_info},
    {AttentionDType::fp16, 64, false, EntryTile::rows64, "fp16_d64_noncausal_rows64",
     ka::attention_fwd_fp16_d64_noncausal_rows64, ka::attention_fwd_fp16_d64_rows64_info},
    {AttentionDType::bf16, 128, false, EntryTile::rows64, "bf16_d128_noncausal_rows64",
     ka::attention_fwd_bf16_d128_noncausal_rows64, ka::attention_fwd_bf16_d128_rows64_info},
    {AttentionDType::fp16, 128, false, EntryTile::rows64, "fp16_d128_noncausal_rows64",
     ka::attention_fwd_fp16_d128_noncausal_rows64, ka::attention_fwd_fp16_d128_rows64_info},
    {AttentionDType::bf16, 64, false, EntryTile::partial, "bf16_d64_noncausal_partial",
     ka::attention_fwd_bf16_d64_noncausal_partial, ka::attention_fwd_bf16_d64_info},
    {AttentionDType::fp16, 64, false, EntryTile::partial, "fp16_d64_noncausal_partial",
     ka::attention_fwd_fp16_d64_noncausal_partial, ka::attention_fwd_fp16_d64_info},
    {AttentionDType::bf16, 128, false, EntryTile::split, "bf16_d128_noncausal_split", ka::attention_fwd_bf16_d128_noncausal_split,
     ka::attention_fwd_bf16_d128_split_info},
    {AttentionDType::fp16, 128, false, EntryTile::split, "fp16_d128_noncausal_split", ka::attention_fwd_fp16_d128_noncausal_split,
     ka::attention_fwd_fp16_d128_split_info},
    {AttentionDType::bf16, 64, false, EntryTile::split, "bf16_d64_noncausal_split", ka::attention_fwd_bf16_d64_noncausal_split,
     ka::attention_fwd_bf16_d64_split_info},
    {AttentionDType::fp16, 64, false, EntryTile::split, "fp16_d64_noncausal_split", ka::attention_fwd_fp16_d64_noncausal_split,
     ka::attention_fwd_fp16_d64_split_info},
};

// The entry of this configuration and tile; InvalidArgument (one line) where none ships.
const Entry& find_entry(AttentionDType dtype, int head_dim, bool causal, EntryTile tile = EntryTile::staged) {
  if (dtype != AttentionDType::bf16 && dtype != AttentionDType::fp16)
    throw InvalidArgument(fmt::format("attention: unsupported dtype {} (bf16 or fp16)", static_cast<int>(dtype)));
  if (tile == EntryTile::rows64 && !ka::kKeyGroupsBuilt)
    throw InvalidArgument("attention: tile policy rows64 is not in this build (it needs XSTAGE_ATTN_INTRA_WG_OVERLAP=ON)");
  for (const Entry& e : kEntries)
    if (e.tile == tile && e.dtype == dtype && e.head_dim == head_dim && e.causal == causal) return e;
  if (head_dim != 64 && head_dim != 128)
    throw InvalidArgument(fmt::format("attention: head dim {} is not supported (64 or 128)", head_dim));
  if (tile == EntryTile::rows128)
    throw InvalidArgument(fmt::format("attention: tile policy rows128 is a d = 64 tile; head dim is {}", head_dim));
  if (tile == EntryTile::split)
    throw InvalidArgument(fmt::format("attention: tile policy split is a non-causal tile (d = 64 or 128); got head dim {}{}",
                                      head_dim, causal ? ", causal" : ""));
  if (tile == EntryTile::rows64)
    throw InvalidArgument(fmt::format(
        "attention: tile policy rows64 ships for d = 64 and non-causal d = 128; got head dim {}{}", head_dim,
        causal ? ", causal" : ", non-causal"));
  if (tile == EntryTile::partial)
    throw InvalidArgument(fmt::format("attention: tile policy partial is the non-causal d = 64 tile; got head dim {}{}",
                                      head_dim, causal ? ", causal" : ""));
  if (tile == EntryTile::long_kv)
    throw InvalidArgument(fmt::format("attention: tile policy long_kv is the non-causal d = 128 tile; got head dim {}{}",
                                      head_dim, causal ? ", causal" : ""));
  throw InvalidArgument(fmt::format("attention: no such tile for head dim {}{}", head_dim, causal ? ", causal" : ""));
}

void check_tile_policy(AttentionTilePolicy policy) {
  if (policy != AttentionTilePolicy::automatic && policy != AttentionTilePolicy::staged &&
      policy != AttentionTilePolicy::rows128 && policy != AttentionTilePolicy::split &&
      policy != AttentionTilePolicy::long_kv && policy != AttentionTilePolicy::partial &&
      policy != AttentionTilePolicy::rows64)
    throw InvalidArgument(fmt::format("attention: unknown tile policy {}", static_cast<int>(policy)));
}

void check_causal_options(const AttentionArgs& a) {
  if (a.causal_align != causal::Align::top_left && a.causal_align != causal::Align::bottom_right)
    throw InvalidArgument(fmt::format("attention: unknown causal alignment {}", static_cast<int>(a.causal_align)));
  if (a.causal_order != causal::TileOrder::head_major && a.causal_order != causal::TileOrder::longest_first &&
      a.causal_order != causal::TileOrder::grouped && a.causal_order != causal::TileOrder::claimed &&
      a.causal_order != causal::TileOrder::automatic)
    throw InvalidArgument(fmt::format("attention: unknown causal tile order {}", static_cast<int>(a.causal_order)));
  if (a.causal_group < 0 || a.causal_group > a.heads * a.batch)
    throw InvalidArgument(fmt::format("attention: causal group {} must be 0 (planned) or 1..{} (heads x batch)",
                                      a.causal_group, a.heads * a.batch));
  if (a.causal_group != 0 && !causal::takes_group(a.causal_order))
    throw InvalidArgument("attention: a causal group needs the auto, grouped or claimed tile order");
  if (a.causal && a.causal_order == causal::TileOrder::claimed &&
      (a.tile_policy == AttentionTilePolicy::rows128 || a.tile_policy == AttentionTilePolicy::rows64))
    throw InvalidArgument(fmt::format(
        "attention: the claimed causal order runs the staged tiles; tile policy {} takes a static order",
        a.tile_policy == AttentionTilePolicy::rows64 ? "rows64" : "rows128"));
  if (a.causal_align == causal::Align::bottom_right && !a.causal)
    throw InvalidArgument("attention: causal alignment bottom-right needs a causal call");
  // Bottom-right: query i sees keys j <= i + kv_len - q_len, so rows below q_len - kv_len would
  // see none (FlashAttention writes zeros there; here that is refused).
  if (a.causal && a.causal_align == causal::Align::bottom_right && a.q_len > a.kv_len)
    throw InvalidArgument(fmt::format(
        "attention: bottom-right causal with q_len {} > kv_len {} leaves query rows 0..{} without a visible key",
        a.q_len, a.kv_len, a.q_len - a.kv_len - 1));
}

float effective_scale(const AttentionArgs& a) {
  return a.softmax_scale == 0.f ? 1.f / std::sqrt(static_cast<float>(a.head_dim)) : a.softmax_scale;
}

}  // namespace

void validate(const AttentionArgs& a) {
  if (a.dtype != AttentionDType::bf16 && a.dtype != AttentionDType::fp16)
    throw InvalidArgument(fmt::format("attention: unsupported dtype {} (bf16 or fp16)", static_cast<int>(a.dtype)));
  if (a.head_dim != 64 && a.head_dim != 128)
    throw InvalidArgument(fmt::format("attention: head dim {} is not supported (64 or 128)", a.head_dim));
  if (a.batch <= 0 || a.heads <= 0 || a.q_len <= 0 || a.kv_len <= 0)
    throw InvalidArgument(fmt::format("attention: sizes must be positive (batch {}, heads {}, q_len {}, kv_len {})",
                                      a.batch, a.heads, a.q_len, a.kv_len));
  // The smallest tile any policy may launch (the key-group tiles' 64 rows) bounds the work items.
  const int block_m = ka::rows64_tile_config(a.head_dim).block_m;
  const long long tiles = static_cast<long long>((a.q_len + block_m - 1) / block_m) * a.heads * a.batch;
  if (tiles > std::numeric_limits<int>::max() - (1 << 20))
    throw InvalidArgument(fmt::format("attention: {} tiles (batch {} x heads {} x q tiles) exceed the kernel's int range",
                                      tiles, a.batch, a.heads));
  if (!(std::isfinite(a.softmax_scale) && a.softmax_scale >= 0.f))
    throw InvalidArgument(fmt::format("attention: softmax scale {} must be finite and > 0 (0 = 1/sqrt(d))",
                                      a.softmax_scale));
  if (a.num_ctas < 0) throw InvalidArgument(fmt::format("attention: num_ctas {} must be >= 0", a.num_ctas));
  check_tile_policy(a.tile_policy);
  check_causal_options(a);
  check_pointer("q", a.q);
  check_pointer("k", a.k);
  check_pointer("v", a.v);
  check_pointer("o", a.o);
  check_tensor("q", a.q_strides, a.batch, a.q_len, a.heads);
  check_tensor("k", a.k_strides, a.batch, a.kv_len, a.heads);
  check_tensor("v", a.v_strides, a.batch, a.kv_len, a.heads);
  check_tensor("o", a.o_strides, a.batch, a.q_len, a.heads);
  if (a.return_lse) {
    if (a.lse == nullptr) throw InvalidArgument("attention: LSE requested (return_lse) but the lse buffer is null");
    if (!aligned(a.lse, 4)) throw InvalidArgument("attention: lse buffer is not 4-byte aligned");
    const bool dense = a.lse_stride_b == 0 && a.lse_stride_h == 0;
    if (!dense) {
      if (a.lse_stride_h < (a.heads > 1 ? a.q_len : 0) || a.lse_stride_b < (a.batch > 1 ? a.q_len : 0))
        throw InvalidArgument(fmt::format(
            "attention: lse strides (batch {}, head {}) must be >= q_len {} so rows of different heads do not overlap",
            a.lse_stride_b, a.lse_stride_h, a.q_len));
    }
  }
}

const char* causal_align_name(causal::Align a) {
  return a == causal::Align::bottom_right ? "bottom-right" : a == causal::Align::top_left ? "top-left" : "unknown";
}
const char* causal_order_name(causal::TileOrder o) {
  return o == causal::TileOrder::longest_first ? "longest-first"
         : o == causal::TileOrder::head_major  ? "head-major"
         : o == causal::TileOrder::grouped     ? "grouped"
         : o == causal::TileOrder::claimed     ? "claimed"
         : o == causal::TileOrder::automatic   ? "auto"
                                               : "unknown";
}
causal::Align parse_causal_align(const std::string& s) {
  if (s == "top-left") return causal::Align::top_left;
  if (s == "bottom-right") return causal::Align::bottom_right;
  throw InvalidArgument(fmt::format("attention: causal alignment must be top-left or bottom-right, got '{}'", s));
}
causal::TileOrder parse_causal_order(const std::string& s) {
  if (s == "head-major") return causal::TileOrder::head_major;
  if (s == "longest-first") return causal::TileOrder::longest_first;
  if (s == "grouped") return causal::TileOrder::grouped;
  if (s == "claimed") return causal::TileOrder::claimed;
  if (s == "auto") return causal::TileOrder::automatic;
  throw InvalidArgument(fmt::format(
      "attention: causal tile order must be auto, head-major, longest-first, grouped or claimed, got '{}'", s));
}
int causal_key_offset(const AttentionArgs& a) {
  return a.causal ? causal::key_offset(a.causal_align, a.q_len, a.kv_len) : 0;
}

namespace {
const Entry& entry_for(AttentionDType dtype, int head_dim, bool causal, int kv_len, AttentionTilePolicy policy) {
  check_tile_policy(policy);
  EntryTile tile = EntryTile::staged;
  if (policy == AttentionTilePolicy::rows128) tile = EntryTile::rows128;
  if (policy == AttentionTilePolicy::split) tile = EntryTile::split;
  if (policy == AttentionTilePolicy::long_kv) tile = EntryTile::long_kv;
  if (policy == AttentionTilePolicy::partial) tile = EntryTile::partial;
  if (policy == AttentionTilePolicy::rows64) tile = EntryTile::rows64;
  // The long-key tile ships for d = 128 non-causal only (a causal build of it ran 0.93-0.97x the
  // staged tile: docs/perf-log.md §Session 31); other automatic calls keep the staged tile.
  if (policy == AttentionTilePolicy::automatic && kv_len >= ka::kLongKvThreshold && head_dim == 128 && !causal)
    tile = EntryTile::long_kv;
  return find_entry(dtype, head_dim, causal, tile);
}
AttentionInstantiation describe(const Entry& e);

// CTA slots of a launch: one per SM of the current device, or num_ctas.
int launch_slots(const AttentionArgs& a) {
  int slots = 0;
  XS_CUDA(kernels::persistent_grid(a.num_ctas, std::numeric_limits<long long>::max(), slots), "reading the SM count");
  return slots;
}

// A host decision that walks a launch's work items, remembered per shape (thread-safe; bounded:
// the shapes of one process are few). One instance per decision.
template <class Key, class Value>
class ShapeCache {
 public:
  template <class Compute>
  Value get(const Key& key, Compute&& compute) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    if (cache_.size() >= 1024) cache_.clear();
    return cache_[key] = compute();
  }

 private:
  std::mutex mu_;
  std::map<Key, Value> cache_;
};

// kernels/attention/tile_rules.hpp causal_d64_tile, cached per shape: it walks up to four waves of
// tiles three times (a few microseconds of host time per call otherwise).
ka::CausalD64Tile causal_d64_tile_for(const AttentionArgs& a, int slots) {
  static ShapeCache<std::tuple<int, int, int, int, int, int>, ka::CausalD64Tile> cache;
  const int offset = causal_key_offset(a), pairs = a.heads * a.batch;
  return cache.get({a.q_len, a.kv_len, offset, pairs, slots, static_cast<int>(a.causal_order)}, [&] {
    return ka::causal_d64_tile(a.q_len, a.kv_len, offset, pairs, slots, a.causal_order);
  });
}

// kernels/attention/tile_rules.hpp noncausal_d64_tile, cached per shape: it walks up to eight
// rounds of tiles three times.
ka::NonCausalD64Tile noncausal_d64_tile_for(const AttentionArgs& a, int slots) {
  static ShapeCache<std::tuple<int, int, int, int, bool, bool>, ka::NonCausalD64Tile> cache;
  const int pairs = a.heads * a.batch;
  return cache.get({a.q_len, a.kv_len, pairs, slots, a.partial_tiles, a.tail_split}, [&] {
    return ka::noncausal_d64_tile(a.q_len, a.kv_len, pairs, slots, a.partial_tiles, a.tail_split);
  });
}

// The automatic causal order (docs/attention.md §Persistent scheduler, "auto"): claimed at d = 128
// from kClaimedFromKeys keys (where its one-head groups keep K/V in L2 and it ran ahead of
// grouped), grouped elsewhere (d = 64, where its 192-row tiles lost, and shorter keys: even).
constexpr int kClaimedFromKeys = 8192;
bool claimed_for(const AttentionArgs& a) {
  return a.causal && a.head_dim == 128 && a.kv_len >= kClaimedFromKeys && a.tile_policy != AttentionTilePolicy::rows128 &&
         a.tile_policy != AttentionTilePolicy::rows64;
}

// The call with its causal order resolved (automatic -> grouped or claimed); every launch
// decision below reads the resolved order.
AttentionArgs resolved(const AttentionArgs& a) {
  AttentionArgs r = a;
  if (a.causal_order == causal::TileOrder::automatic)
    r.causal_order = claimed_for(a) ? causal::TileOrder::claimed : causal::TileOrder::grouped;
  return r;
}

// What attention_forward launches for this call: entry_for plus the shape rules that need the
// grid (automatic policy; kernels/attention/tile_rules.hpp: causal d = 64 causal_d64_tile; non-causal
// d = 128 noncausal_d128_tile, d = 64 noncausal_d64_tile).
const Entry& entry_for_call(const AttentionArgs& a) {
  const Entry& base = entry_for(a.dtype, a.head_dim, a.causal, a.kv_len, a.tile_policy);
  // The shape rules refine the automatic staged choice only (the long-key tile splits the same way).
  if (a.tile_policy != AttentionTilePolicy::automatic || base.tile != EntryTile::staged) return base;
  const int slots = launch_slots(a);
  if (a.causal) {
    // (The claimed order runs the staged tiles only.)
    if (a.head_dim == 64 && a.causal_order != causal::TileOrder::claimed) {
      const ka::CausalD64Tile t = causal_d64_tile_for(a, slots);
      if (t == ka::CausalD64Tile::rows128) return find_entry(a.dtype, 64, true, EntryTile::rows128);
      if (t == ka::CausalD64Tile::rows64) return find_entry(a.dtype, 64, true, EntryTile::rows64);
    }
    return base;
  }
  if (a.head_dim == 128) {
    const ka::NonCausalD128Tile t = ka::noncausal_d128_tile(a.q_len, a.kv_len, a.heads * a.batch, slots, a.tail_split);
    if (t == ka::NonCausalD128Tile::rows64) return find_entry(a.dtype, 128, false, EntryTile::rows64);
    if (t == ka::NonCausalD128Tile::split) return find_entry(a.dtype, 128, false, EntryTile::split);
    return base;
  }
  const ka::NonCausalD64Tile t64 = noncausal_d64_tile_for(a, slots);
  if (t64 == ka::NonCausalD64Tile::rows64) return find_entry(a.dtype, 64, false, EntryTile::rows64);
  if (t64 == ka::NonCausalD64Tile::split) return find_entry(a.dtype, 64, false, EntryTile::split);
  if (t64 == ka::NonCausalD64Tile::rows128) return find_entry(a.dtype, 64, false, EntryTile::rows128);
  if (t64 == ka::NonCausalD64Tile::partial) return find_entry(a.dtype, 64, false, EntryTile::partial);
  return base;
}
}  // namespace

AttentionInstantiation select_instantiation(const AttentionArgs& a) {
  return describe(entry_for_call(resolved(a)));
}

causal::TileOrder causal_order_for(const AttentionArgs& a) {
  validate(a);
  return resolved(a).causal_order;
}

AttentionInstantiation select_instantiation(AttentionDType dtype, int head_dim, bool causal) {
  return describe(find_entry(dtype, head_dim, causal));
}
AttentionInstantiation select_instantiation(AttentionDType dtype, int head_dim, bool causal, int kv_len,
                                            AttentionTilePolicy policy) {
  return describe(entry_for(dtype, head_dim, causal, kv_len, policy));
}

namespace {
AttentionInstantiation describe(const Entry& e) {
  const ka::KernelInfo k = e.info();
  AttentionInstantiation r;
  r.name = e.name;
  r.block_m = k.tile.block_m;
  r.block_n = k.tile.block_n;
  r.stages = k.tile.stages;
  r.consumer_warpgroups = k.tile.consumer_warpgroups;
  r.threads = k.threads;
  r.smem_bytes = k.smem_bytes;
  r.producer_regs = k.producer_regs;
  r.consumer_regs = k.consumer_regs;
  r.intra_wg_overlap = k.intra_wg_overlap;
  r.pingpong = k.pingpong;
  r.lazy_rescale = k.tile.lazy_rescale;
  r.q_stages = k.tile.q_stages;
  return r;
}
}  // namespace

ka::AttentionParams to_kernel_params(const AttentionArgs& args) {
  const AttentionArgs a = resolved(args);
  ka::AttentionParams p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.return_lse ? a.lse : nullptr;
  p.batch = a.batch;
  p.heads = a.heads;
  p.q_len = a.q_len;
  p.kv_len = a.kv_len;
  p.head_dim = a.head_dim;
  p.q_stride_b = usable_stride(a.q_strides.b, a.batch);
  p.q_stride_s = usable_stride(a.q_strides.s, a.q_len);
  p.q_stride_h = usable_stride(a.q_strides.h, a.heads);
  p.k_stride_b = usable_stride(a.k_strides.b, a.batch);
  p.k_stride_s = usable_stride(a.k_strides.s, a.kv_len);
  p.k_stride_h = usable_stride(a.k_strides.h, a.heads);
  p.v_stride_b = usable_stride(a.v_strides.b, a.batch);
  p.v_stride_s = usable_stride(a.v_strides.s, a.kv_len);
  p.v_stride_h = usable_stride(a.v_strides.h, a.heads);
  p.o_stride_b = usable_stride(a.o_strides.b, a.batch);
  p.o_stride_s = usable_stride(a.o_strides.s, a.q_len);
  p.o_stride_h = usable_stride(a.o_strides.h, a.heads);
  const bool dense_lse = a.lse_stride_b == 0 && a.lse_stride_h == 0;
  p.lse_stride_h = dense_lse ? a.q_len : a.lse_stride_h;
  p.lse_stride_b = dense_lse ? static_cast<int64_t>(a.heads) * a.q_len : a.lse_stride_b;
  p.softmax_scale = effective_scale(a);
  p.causal = a.causal;
  p.causal_key_offset = causal_key_offset(a);
  p.causal_order = a.causal_order;
  p.num_ctas = a.num_ctas;
  return p;
}

namespace {
// The grouped / claimed order's heads per group for this call (causal::plan_group /
// plan_claimed_group on the launched tile and grid), cached per shape: planning walks every work
// item once per candidate group.
int planned_causal_group(const AttentionArgs& a, const Entry& e, const ka::AttentionParams& p) {
  if (a.causal_group > 0) return a.causal_group;  // forced (tests, A/B)
  const ka::KernelInfo k = e.info();
  int grid = 0;
  XS_CUDA(ka::attention_grid(p, k.tile.block_m, grid), "reading the SM count");
  const causal::TileShape t{a.q_len, a.kv_len, k.tile.block_m, k.tile.block_n, causal_key_offset(a)};
  const int pairs = a.heads * a.batch;
  const bool claimed = a.causal_order == causal::TileOrder::claimed;
  static ShapeCache<std::tuple<int, int, int, int, int, int, int, bool>, int> cache;
  return cache.get({t.q_len, t.kv_len, t.block_m, t.block_n, t.key_offset, pairs, grid, claimed}, [&] {
    return claimed ? causal::plan_claimed_group(t, pairs, grid) : causal::plan_group(t, pairs, grid);
  });
}
}  // namespace

int causal_group_for(const AttentionArgs& args) {
  validate(args);
  const AttentionArgs a = resolved(args);
  if (!a.causal || a.causal_order == causal::TileOrder::head_major) return 0;
  if (a.causal_order == causal::TileOrder::longest_first) return a.heads * a.batch;
  return planned_causal_group(a, entry_for_call(a), to_kernel_params(a));
}

namespace {
// The call as it runs on `stream`: resolved(), except that a stream capturing a CUDA graph cannot
// take the claimed order (its per-stream counters are looked up by the stream's id, which CUDA
// does not give out during capture): automatic then runs grouped (the same results, bit for bit),
// an explicit claimed is refused.
AttentionArgs resolved_on(const AttentionArgs& args, cudaStream_t stream) {
  AttentionArgs a = resolved(args);
  if (!a.causal || a.causal_order != causal::TileOrder::claimed) return a;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  XS_CUDA(cudaStreamIsCapturing(stream, &st), "attention: querying the stream's capture status");
  if (st == cudaStreamCaptureStatusNone) return a;
  if (args.causal_order != causal::TileOrder::automatic)
    throw InvalidArgument("attention: the claimed causal order cannot be captured into a CUDA graph (use auto or grouped)");
  a.causal_order = causal::TileOrder::grouped;
  return a;
}
}  // namespace

void reserve_split_workspace(const AttentionArgs& args, cudaStream_t stream) {
  validate(args);
  const AttentionArgs a = resolved_on(args, stream);
  if (a.tail_split && splits_tail(entry_for_call(a))) split_workspace_for(stream, launch_slots(a));
  if (a.causal && a.causal_order == causal::TileOrder::claimed) claim_counter_for(stream);
}

void attention_forward(const AttentionArgs& args, cudaStream_t stream) {
  validate(args);
  const AttentionArgs a = resolved_on(args, stream);
  const Entry& e = entry_for_call(a);
  ka::AttentionParams p = to_kernel_params(a);
  if (a.causal && causal::takes_group(a.causal_order)) p.causal_group = planned_causal_group(a, e, p);
  if (a.causal && a.causal_order == causal::TileOrder::claimed) p.claim_counter = claim_counter_for(stream);
  if (splits_tail(e) && a.tail_split) {
    // The long-key and split kernels may split tiles along the keys (kernels/attention/tile_scheduler.cuh):
    // workspace for as many parts as the launch has CTA slots (one per SM, or num_ctas).
    const SplitWorkspace w = split_workspace_for(stream, launch_slots(a));
    p.split_workspace = w.parts;
    p.split_capacity = w.capacity;
  }
  const cudaError_t err = e.launch(p, stream);
  if (err != cudaSuccess)
    throw Error(format_error(
        fmt::format("launching attention {} (batch {}, heads {}, q_len {}, kv_len {})", e.name, a.batch, a.heads,
                    a.q_len, a.kv_len),
        std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")"));
}

double attention_flops(const AttentionArgs& a) {
  double pairs = 0;
  if (!a.causal) {
    pairs = static_cast<double>(a.q_len) * a.kv_len;
  } else {
    // Query i sees keys 0..min(i + off, kv_len - 1): sum over i of min(i + off + 1, kv_len),
    // off >= 0. The first r = min(q_len, kv_len - off) rows see i + off + 1 keys, the rest all.
    const double off = causal_key_offset(a);
    const double r = std::min<double>(a.q_len, std::max<double>(0, a.kv_len - off));
    pairs = r * off + r * (r + 1) / 2 + (a.q_len - r) * a.kv_len;
  }
  return 4.0 * a.batch * a.heads * a.head_dim * pairs;
}

void attention_reference_host(const AttentionArgs& a, const float* q, const float* k, const float* v, float* o,
                              float* lse) {
  const float scale = effective_scale(a);
  const int off = causal_key_offset(a);
  std::vector<double> s(a.kv_len);
  for (int b = 0; b < a.batch; ++b)
    for (int h = 0; h < a.heads; ++h)
      for (int i = 0; i < a.q_len; ++i) {
        const float* qi = q + b * a.q_strides.b + h * a.q_strides.h + static_cast<int64_t>(i) * a.q_strides.s;
        double m = -INFINITY;
        for (int j = 0; j < a.kv_len; ++j) {
          if (a.causal && j > i + off) {
            s[j] = -INFINITY;
            continue;
          }
          const float* kj = k + b * a.k_strides.b + h * a.k_strides.h + static_cast<int64_t>(j) * a.k_strides.s;
          double dot = 0;
          for (int d = 0; d < a.head_dim; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < a.kv_len; ++j) {
          s[j] = std::isinf(s[j]) ? 0.0 : std::exp(s[j] - m);
          sum += s[j];
        }
        float* oi = o + b * a.o_strides.b + h * a.o_strides.h + static_cast<int64_t>(i) * a.o_strides.s;
        for (int d = 0; d < a.head_dim; ++d) {
          double acc = 0;
          for (int j = 0; j < a.kv_len; ++j)
            if (s[j] != 0.0)
              acc += s[j] * v[b * a.v_strides.b + h * a.v_strides.h + static_cast<int64_t>(j) * a.v_strides.s + d];
          oi[d] = sum > 0 ? static_cast<float>(acc / sum) : 0.f;
        }
        if (lse != nullptr)
          lse[(static_cast<int64_t>(b) * a.heads + h) * a.q_len + i] =
              sum > 0 ? static_cast<float>(m + std::log(sum)) : -INFINITY;
      }
}

}  // namespace xstage::ops
