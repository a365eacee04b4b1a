// MoE grouped-GEMM operator: validation, block-M planning, choice of the compiled
// instantiation, launch. No device code here: the kernels are reached through
// kernels/moe/launch.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/moe/launch.hpp"
#include "kernels/moe/policy.hpp"
#include "kernels/moe/w4a8_rs_layout.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_gemm.hpp"

namespace xstage::ops {

namespace km = kernels::moe;

const char* moe_quant_name(MoeQuant q) {
  switch (q) {
    case MoeQuant::w8a8: return "w8a8";
    case MoeQuant::w4a8_int4: return "w4a8_int4";
    case MoeQuant::w4a8_mxfp4: return "w4a8_mxfp4";
  }
  return "unknown";
}

const char* moe_weight_layout_name(MoeWeightLayout l) {
  switch (l) {
    case MoeWeightLayout::rows: return "rows";
    case MoeWeightLayout::int4_rs: return "int4_rs";
    case MoeWeightLayout::mxfp4_rs: return "mxfp4_rs";
    case MoeWeightLayout::int4_rs_lut: return "int4_rs_lut";
    case MoeWeightLayout::int4_rs_lut_glu: return "int4_rs_lut_glu";
    case MoeWeightLayout::mxfp4_rs_glu: return "mxfp4_rs_glu";
  }
  return "unknown";
}

const char* moe_epilogue_name(MoeEpilogue e) {
  switch (e) {
    case MoeEpilogue::bf16: return "bf16";
    case MoeEpilogue::swiglu_fp8: return "swiglu_fp8";
  }
  return "unknown";
}

namespace {

bool aligned(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

void check_pointer(const char* name, const void* p, uintptr_t align, const char* why) {
  if (p == nullptr) throw InvalidArgument(fmt::format("moe gemm: {} is a null pointer", name));
  if (!aligned(p, align))
    throw InvalidArgument(fmt::format("moe gemm: {} = {} is not {}-byte aligned ({})", name, p, align, why));
}

// --- The dispatch table: one row per line of kernels/moe/configs.def ---

// What a weight-format policy serves.
template <class W>
struct FormatOf;
template <>
struct FormatOf<km::Fp8Blocks> {
  static constexpr bool serves(MoeQuant q) { return q == MoeQuant::w8a8; }
  static constexpr MoeWeightLayout layout(bool) { return MoeWeightLayout::rows; }
};
template <>
struct FormatOf<km::W4Rows> {
  static constexpr bool serves(MoeQuant q) { return moe_is_w4a8(q); }
  static constexpr MoeWeightLayout layout(bool) { return MoeWeightLayout::rows; }
};
template <>
struct FormatOf<km::Int4Lut> {
  static constexpr bool serves(MoeQuant q) { return q == MoeQuant::w4a8_int4; }
  static constexpr MoeWeightLayout layout(bool glu) {
    return glu ? MoeWeightLayout::int4_rs_lut_glu : MoeWeightLayout::int4_rs_lut;
  }
};
template <>
struct FormatOf<km::Mxfp4Rs> {
  static constexpr bool serves(MoeQuant q) { return q == MoeQuant::w4a8_mxfp4; }
  static constexpr MoeWeightLayout layout(bool glu) { return glu ? MoeWeightLayout::mxfp4_rs_glu : MoeWeightLayout::mxfp4_rs; }
};

using LaunchFn = cudaError_t (*)(const km::MoeW4A8Params&, cudaStream_t);
using InfoFn = km::KernelInfo (*)(km::W4Format);

struct Entry {
  const char* name;
  bool (*serves)(MoeQuant);
  MoeWeightLayout layout;
  MoeActScales act;
  MoeEpilogue epilogue;
  int block_m;
  int block_n;  // weight rows per tile (SwiGLU: gate + up)
  int cluster_m;
  int cluster_n;
  bool serial_only;  // w8a8 128 x 192 / 128 x 256: schedules 0 and 2 only (no room for the overlap one), default 2
  // Planning prior (configs.def): rate per output element, tokens per expert it is planned for.
  double rate;
  int min_tokens;
  int max_tokens;
  LaunchFn launch;
  InfoFn info;
};

template <class C>
constexpr Entry make_entry(const char* name, double rate, int min_tokens, int max_tokens, LaunchFn launch, InfoFn info) {
  using W = typename C::WeightFormat;
  using E = typename C::Epilogue;
  using T = typename C::TileShape;
  constexpr bool glu = std::is_same_v<E, km::SwiGluFp8Interleaved>;
  constexpr MoeEpilogue epilogue = std::is_same_v<E, km::Bf16Rows> ? MoeEpilogue::bf16 : MoeEpilogue::swiglu_fp8;
  constexpr MoeActScales act =
      std::is_same_v<typename C::ActScales, km::ActPerToken> ? MoeActScales::per_token : MoeActScales::per_128;
  constexpr bool serial = std::is_same_v<W, km::Fp8Blocks> && T::block_m == 128 && T::block_n >= 192;
  return Entry{name,       FormatOf<W>::serves, FormatOf<W>::layout(glu), act,    epilogue,   T::block_m,
               T::block_n, C::ClusterShape::m,  C::ClusterShape::n,        serial, rate,       min_tokens,
               max_tokens, launch,              info};
}

using km::kAnyTokens;
using km::MoeConfig;
using km::Fp8Blocks;
using km::W4Rows;
using km::Int4Lut;
using km::Mxfp4Rs;
using km::ActPer128;
using km::ActPerToken;
using km::Tile;
using km::Cluster;
using km::Bf16Rows;
using km::SwiGluFp8;
using km::SwiGluFp8Interleaved;

const Entry kEntries[] = {
#define XSTAGE_MOE_CONFIG(name, rate, min_tokens, max_tokens, ...) \
  make_entry<__VA_ARGS__>(#name, rate, min_tokens, max_tokens, km::moe_launch_##name, km::moe_info_##name),
#include "kernels/moe/configs.def"
#undef XSTAGE_MOE_CONFIG
};

// Passes of the persistent grid over `tiles` equal tiles (each of `ctas` CTAs takes tiles in
// turn), a partial last wave counted whole.
double whole_waves(long long tiles, int ctas) { return static_cast<double>((tiles + ctas - 1) / ctas); }

int tokens_per_expert(const MoeGemmArgs& a) {
  if (a.tokens_per_expert_hint > 0) return a.tokens_per_expert_hint;
  return a.experts > 0 ? a.m_total / a.experts : 0;
}

km::W4Format w4_format(MoeQuant q) { return q == MoeQuant::w4a8_mxfp4 ? km::W4Format::mxfp4 : km::W4Format::int4_g128; }

km::KernelInfo entry_info(const Entry& e, MoeQuant q) { return e.info(w4_format(q)); }

// CTAs of the persistent grid: num_ctas, or one per SM of the current GPU (132 where none can
// be asked, e.g. planning on a machine without a GPU: the H100 / H200 count).
int grid_ctas(const MoeGemmArgs& a) {
  if (a.num_ctas > 0) return a.num_ctas;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      sms > 0)
    return sms;
  cudaGetLastError();  // planning without a GPU is not an error
  return 132;
}

// Whether entry e serves the call's data: weight format and layout, activation scales, epilogue.
bool serves_data(const Entry& e, const MoeGemmArgs& a) {
  return e.serves(a.quant) && e.layout == a.b_layout && e.act == a.a_scale_granularity && e.epilogue == a.epilogue;
}

// The tiles shipped for the call's weights (from the table), for messages.
std::string shipped_tiles(const MoeGemmArgs& a) {
  auto list = [&](bool same_scales) {
    std::string l;
    for (const Entry& e : kEntries)
      if (e.serves(a.quant) && e.layout == a.b_layout && (!same_scales || e.act == a.a_scale_granularity)) {
        if (!l.empty()) l += ", ";
        l += fmt::format("{} m{}n{} {}x{}", moe_epilogue_name(e.epilogue), e.block_m, e.block_n, e.cluster_m, e.cluster_n);
      }
    return l;
  };
  const char* scales = a.a_scale_granularity == MoeActScales::per_token ? "per-token" : "per-128";
  const char* other = a.a_scale_granularity == MoeActScales::per_token ? "per-128" : "per-token";
  const std::string same = list(true);
  if (same.empty()) {
    const std::string any = list(false);
    if (any.empty()) return fmt::format("no shipped kernel reads the {} layout", moe_weight_layout_name(a.b_layout));
    return fmt::format("the {} layout ships with {} activation scales only: {}", moe_weight_layout_name(a.b_layout),
                       other, any);
  }
  if (a.b_layout == MoeWeightLayout::rows)
    return fmt::format("{} ships: {}", moe_is_w4a8(a.quant) ? "w4a8" : "w8a8", same);
  return fmt::format("the {} layout with {} activation scales ships: {}", moe_weight_layout_name(a.b_layout), scales,
                     same);
}

// The planner: among the entries `legal` admits, those planned for the call's tokens per expert
// ([min_tokens, max_tokens]; all of them where none is), the one with the least whole waves x
// tile area / rate; an earlier entry of the list on ties.
template <class Legal>
const Entry* best_entry(const MoeGemmArgs& a, Legal legal) {
  const int tokens = tokens_per_expert(a);
  bool any_planned = false;
  for (const Entry& e : kEntries)
    if (legal(e) && tokens >= e.min_tokens && tokens <= e.max_tokens) any_planned = true;
  const int ctas = grid_ctas(a);
  const Entry* best = nullptr;
  double best_cost = 0;
  for (const Entry& e : kEntries) {
    if (!legal(e) || (any_planned && (tokens < e.min_tokens || tokens > e.max_tokens))) continue;
    const long long tiles = static_cast<long long>(std::max(a.experts, 1)) * ((std::max(tokens, 1) + e.block_m - 1) / e.block_m) *
                            ((a.n + e.block_n - 1) / e.block_n);
    const double cost = whole_waves(tiles, ctas) * e.block_m * e.block_n / e.rate;
    if (best == nullptr || cost < best_cost) {
      best = &e;
      best_cost = cost;
    }
  }
  return best;
}

bool overlap_schedule(const MoeGemmArgs& a) { return a.schedule >= 0 && (a.schedule & 1); }

const Entry& find_entry(const MoeGemmArgs& a) {
  auto forced = [&](const Entry& e) {
    return serves_data(e, a) && (a.block_m == 0 || e.block_m == a.block_m) &&
           (a.block_n == 0 || e.block_n == a.block_n) &&
           (a.cluster_m == 0 || (e.cluster_m == a.cluster_m && e.cluster_n == a.cluster_n));
  };
  if (const Entry* e = best_entry(a, [&](const Entry& x) { return forced(x) && !(x.serial_only && overlap_schedule(a)); }))
    return *e;
  if (const Entry* e = best_entry(a, forced))  // only the schedule is missing
    throw InvalidArgument(fmt::format("moe gemm: the {} kernel has schedules 0 and 2 (ping-pong, its default); "
                                      "schedule {} needs the overlap bit (no room for a second accumulator)",
                                      e->name, a.schedule));
  // What the plan would be without the forced fields, to name the missing combination.
  const Entry* plan = best_entry(a, [&](const Entry& x) { return serves_data(x, a); });
  if (plan == nullptr)
    throw InvalidArgument(fmt::format("moe gemm: no {} {} kernel for the {} layout with {} activation scales ({})",
                                      moe_quant_name(a.quant), moe_epilogue_name(a.epilogue),
                                      moe_weight_layout_name(a.b_layout),
                                      a.a_scale_granularity == MoeActScales::per_token ? "per-token" : "per-128",
                                      shipped_tiles(a)));
  const int bm = a.block_m != 0 ? a.block_m : plan->block_m;
  const int cm = a.cluster_m != 0 ? a.cluster_m : plan->cluster_m;
  const int cn = a.cluster_m != 0 ? a.cluster_n : plan->cluster_n;
  throw InvalidArgument(fmt::format("moe gemm: no {} {} kernel with block_m {}{} and cluster {}x{} ({})",
                                    moe_quant_name(a.quant), moe_epilogue_name(a.epilogue), bm,
                                    a.block_n != 0 ? fmt::format(", block_n {}", a.block_n) : std::string(), cm, cn,
                                    shipped_tiles(a)));
}

// The schedule a call runs on entry e: the request, or the kernel's default.
int schedule_run(const Entry& e, const MoeGemmArgs& a) {
  if (a.schedule >= 0) return a.schedule;
  return e.serial_only ? 2 : moe_schedule_for(a.quant, -1);
}

km::MoeGemmParams to_params(const MoeGemmArgs& a, const Entry& e) {
  km::MoeGemmParams p;
  p.a = a.a;
  p.a_scales = a.a_scales;
  p.b = a.b;
  p.b_scales = a.b_scales;
  p.counts = a.counts;
  p.offsets = a.offsets;
  p.experts = a.experts;
  p.m_total = a.m_total;
  p.n = a.n;
  p.k = a.k;
  p.out = a.out;
  p.out_ld = a.epilogue == MoeEpilogue::swiglu_fp8 ? a.n / 2 : a.n;
  p.out_scales = a.out_scales;
  p.row_weights = a.row_weights;
  p.num_ctas = a.num_ctas;
  p.schedule = schedule_run(e, a);
  return p;
}

km::MoeW4A8Params to_w4a8_params(const MoeGemmArgs& a, const Entry& e) {
  km::MoeW4A8Params p;
  static_cast<km::MoeGemmParams&>(p) = to_params(a, e);
  p.format = w4_format(a.quant);
  // The register-operand MXFP4 kernels take fp32 block scales (prepack_mxfp4_rs) instead of E8M0.
  const bool e8m0 = a.quant == MoeQuant::w4a8_mxfp4 && a.b_layout == MoeWeightLayout::rows;
  p.b_scales = e8m0 ? nullptr : a.b_scales;
  p.b_e8m0 = e8m0 ? a.b_e8m0 : nullptr;
  return p;
}

}  // namespace

long long moe_weight_bytes(MoeQuant quant, int experts, int n, int k) {
  const long long values = static_cast<long long>(experts) * n * k;
  return moe_is_w4a8(quant) ? values / 2 : values;
}

long long moe_weight_scale_bytes(MoeQuant quant, int experts, int n, int k) {
  const long long e = experts;
  switch (quant) {
    case MoeQuant::w8a8: return e * (n / 128) * (k / 128) * 4;
    case MoeQuant::w4a8_int4: return e * (k / 128) * n * 4;
    case MoeQuant::w4a8_mxfp4: return e * (k / 32) * n;
  }
  return 0;
}

long long moe_weight_bytes(MoeQuant quant, MoeWeightLayout l, int experts, int n, int k) {
  if (moe_layout_is_int4_lut(l)) return static_cast<long long>(experts) * (n / 128) * (k / 128) * km::kRsLutChunkBytes;
  if (!moe_layout_is_mxfp4_rs(l)) return moe_weight_bytes(quant, experts, n, k);
  return static_cast<long long>(experts) * (n / 128) * (k / 128) * km::kRsMxChunkBytes;
}

long long moe_weight_scale_bytes(MoeQuant quant, MoeWeightLayout l, int experts, int n, int k) {
  if (moe_layout_is_int4_lut(l)) return static_cast<long long>(experts) * n * 4;  // channel scales
  if (!moe_layout_is_mxfp4_rs(l)) return moe_weight_scale_bytes(quant, experts, n, k);
  return static_cast<long long>(experts) * (k / 128) * n * 4;
}

void check_routing(const int* counts, const int* offsets, int experts, int m_total) {
  if (counts == nullptr || offsets == nullptr) throw InvalidArgument("moe gemm: host counts/offsets are null");
  long long end_prev = 0;
  for (int e = 0; e < experts; ++e) {
    if (counts[e] < 0) throw InvalidArgument(fmt::format("moe gemm: counts[{}] = {} is negative", e, counts[e]));
    if (offsets[e] < 0) throw InvalidArgument(fmt::format("moe gemm: offsets[{}] = {} is negative", e, offsets[e]));
    if (offsets[e] < end_prev)
      throw InvalidArgument(fmt::format(
          "moe gemm: offsets[{}] = {} overlaps the previous expert's rows (which end at {}); segments must be "
          "ascending and disjoint",
          e, offsets[e], end_prev));
    const long long end = static_cast<long long>(offsets[e]) + counts[e];
    if (end > m_total)
      throw InvalidArgument(fmt::format("moe gemm: expert {} rows [{}, {}) exceed m_total {}", e, offsets[e], end,
                                        m_total));
    end_prev = end;
  }
}

namespace {

// validate()'s checks; returns the kernel entry that serves the arguments (planned once, so
// moe_gemm does not plan twice).
const Entry& validated_entry(const MoeGemmArgs& a) {
  if (a.quant != MoeQuant::w8a8 && !moe_is_w4a8(a.quant))
    throw InvalidArgument(fmt::format("moe gemm: unsupported quantisation {} (w8a8, w4a8_int4 or w4a8_mxfp4)",
                                      static_cast<int>(a.quant)));
  if (a.epilogue != MoeEpilogue::bf16 && a.epilogue != MoeEpilogue::swiglu_fp8)
    throw InvalidArgument(fmt::format("moe gemm: unsupported epilogue {}", static_cast<int>(a.epilogue)));
  if (a.experts <= 0 || a.m_total < 0 || a.n <= 0 || a.k <= 0)
    throw InvalidArgument(fmt::format("moe gemm: sizes must be positive (experts {}, m_total {} >= 0, n {}, k {})",
                                      a.experts, a.m_total, a.n, a.k));
  if (a.k % 128 != 0)
    throw InvalidArgument(fmt::format("moe gemm: k = {} must be a multiple of 128 (the scale block)", a.k));
  if (a.n % 128 != 0)
    throw InvalidArgument(fmt::format("moe gemm: n = {} must be a multiple of 128 (the scale block)", a.n));
  if (a.epilogue == MoeEpilogue::swiglu_fp8 && a.n % 256 != 0)
    throw InvalidArgument(fmt::format(
        "moe gemm: swiglu_fp8 needs n = 2 * intermediate with intermediate a multiple of 128; n = {}", a.n));
  constexpr long long kIntMax = std::numeric_limits<int>::max();
  if (static_cast<long long>(a.m_total) + 128 * (static_cast<long long>(a.experts) + 1) > kIntMax / 2)
    throw InvalidArgument(fmt::format("moe gemm: m_total {} with {} experts exceeds the kernel's row index range",
                                      a.m_total, a.experts));
  if (static_cast<long long>(a.n) * a.k >= (1ll << 40) / 2)
    throw InvalidArgument(fmt::format("moe gemm: an expert's weight ({} x {}) exceeds the TMA stride limit", a.n, a.k));
  if ((static_cast<long long>(a.m_total) / 64 + a.experts) * (a.n / 128) > kIntMax / 2)
    throw InvalidArgument("moe gemm: the tile count exceeds the kernel's int range");
  if (a.block_m != 0 && a.block_m != 64 && a.block_m != 128 && a.block_m != 192 && a.block_m != 256)
    throw InvalidArgument(fmt::format("moe gemm: block_m {} must be 0 (planned), 64, 128, 192 or 256", a.block_m));
  if (a.block_n != 0 && a.block_n != 128 && a.block_n != 192 && a.block_n != 256)
    throw InvalidArgument(fmt::format("moe gemm: block_n {} must be 0 (planned), 128, 192 or 256", a.block_n));
  if ((a.cluster_m == 0) != (a.cluster_n == 0) || a.cluster_m < 0 || a.cluster_n < 0 || a.cluster_m > 2 ||
      a.cluster_n > 2)
    throw InvalidArgument(fmt::format(
        "moe gemm: cluster {}x{} must be 0x0 (planned) or 1 or 2 in each dimension", a.cluster_m, a.cluster_n));
  if (a.num_ctas < 0) throw InvalidArgument(fmt::format("moe gemm: num_ctas {} must be >= 0", a.num_ctas));
  if (a.schedule < -1 || a.schedule > 3)
    throw InvalidArgument(fmt::format("moe gemm: schedule {} must be -1 (default) or 0..3", a.schedule));
  if (a.schedule >= 0 && !moe_schedule_shipped(a.quant, a.schedule))
    throw InvalidArgument(fmt::format(
        "moe gemm: the w4a8 kernels have two consumer schedules; schedule {} must be -1 (default), 0 or 2 (ping-pong)",
        a.schedule));
  if (a.b_layout != MoeWeightLayout::rows && a.b_layout != MoeWeightLayout::int4_rs &&
      !moe_layout_is_mxfp4_rs(a.b_layout) && !moe_layout_is_int4_lut(a.b_layout))
    throw InvalidArgument(fmt::format("moe gemm: unsupported weight layout {}", static_cast<int>(a.b_layout)));
  if ((a.b_layout == MoeWeightLayout::int4_rs || moe_layout_is_int4_lut(a.b_layout)) && a.quant != MoeQuant::w4a8_int4)
    throw InvalidArgument(fmt::format("moe gemm: the {} weight layout serves w4a8_int4 only; got {}",
                                      moe_weight_layout_name(a.b_layout), moe_quant_name(a.quant)));
  if (moe_layout_is_mxfp4_rs(a.b_layout) && a.quant != MoeQuant::w4a8_mxfp4)
    throw InvalidArgument(fmt::format("moe gemm: the {} weight layout serves w4a8_mxfp4 only; got {}",
                                      moe_weight_layout_name(a.b_layout), moe_quant_name(a.quant)));
  if (a.schedule >= 0 && !moe_schedule_shipped(a.quant, a.b_layout, a.schedule))
    throw InvalidArgument(fmt::format("moe gemm: the {} kernel has one consumer schedule; schedule {} must be -1 "
                                      "(default) or 0",
                                      moe_weight_layout_name(a.b_layout), a.schedule));
  if (a.a_scale_granularity != MoeActScales::per_128 && a.a_scale_granularity != MoeActScales::per_token)
    throw InvalidArgument(fmt::format("moe gemm: unsupported activation scale granularity {}",
                                      static_cast<int>(a.a_scale_granularity)));
  if (a.a_scale_granularity == MoeActScales::per_token && !moe_layout_is_int4_lut(a.b_layout) &&
      !moe_layout_is_mxfp4_rs(a.b_layout))
    throw InvalidArgument(fmt::format("moe gemm: per-token activation scales need the int4_rs_lut[_glu] or "
                                      "mxfp4_rs[_glu] weight layout; got {} (the other kernels read per-128 scales "
                                      "[k/128, m_total])",
                                      moe_weight_layout_name(a.b_layout)));
  if (moe_layout_is_glu(a.b_layout) &&
      (a.epilogue != MoeEpilogue::swiglu_fp8 || a.a_scale_granularity != MoeActScales::per_token))
    throw InvalidArgument(fmt::format("moe gemm: the {} weight layout (gate/up-interleaved rows) serves "
                                      "Linear-1 only: swiglu_fp8 with per-token activation scales; got {} with {} "
                                      "scales",
                                      moe_weight_layout_name(a.b_layout), moe_epilogue_name(a.epilogue),
                                      a.a_scale_granularity == MoeActScales::per_token ? "per-token" : "per-128"));
  if (a.b_layout == MoeWeightLayout::mxfp4_rs && a.a_scale_granularity == MoeActScales::per_token &&
      a.epilogue == MoeEpilogue::swiglu_fp8)
    throw InvalidArgument("moe gemm: MXFP4 with per-token activation scales runs Linear-1 (swiglu_fp8) on "
                          "gate/up-interleaved rows only: layout mxfp4_rs_glu (prepack_mxfp4_rs_glu)");
  const Entry& e = find_entry(a);  // a forced block_m / block_n / schedule must be shipped for this epilogue
  check_pointer("a", a.a, 16, "TMA");
  check_pointer("b", a.b, 16, "TMA");
  check_pointer("out", a.out, 16, "16-byte row stores");
  check_pointer("a_scales", a.a_scales, 4, "fp32");
  if (a.quant == MoeQuant::w8a8) check_pointer("b_scales", a.b_scales, 4, "fp32");
  if (a.quant == MoeQuant::w4a8_int4 && !moe_layout_is_int4_lut(a.b_layout))
    check_pointer("b_scales", a.b_scales, 16, "bulk copies of the int4 scales");
  if (moe_layout_is_int4_lut(a.b_layout))
    check_pointer("b_scales", a.b_scales, 4, "fp32 channel scales from quantize_int4_lut");
  if (a.quant == MoeQuant::w4a8_mxfp4 && a.b_layout == MoeWeightLayout::rows)
    check_pointer("b_e8m0", a.b_e8m0, 16, "bulk copies of the mxfp4 scales");
  if (moe_layout_is_mxfp4_rs(a.b_layout))
    check_pointer("b_scales", a.b_scales, 16, "bulk copies of the mxfp4_rs block scales from prepack_mxfp4_rs");
  check_pointer("counts", a.counts, 4, "int32");
  check_pointer("offsets", a.offsets, 4, "int32");
  if (a.epilogue == MoeEpilogue::swiglu_fp8) {
    check_pointer("out_scales", a.out_scales, 4, "fp32");
    check_pointer("row_weights", a.row_weights, 4, "fp32");
  }
  if ((a.host_counts == nullptr) != (a.host_offsets == nullptr))
    throw InvalidArgument("moe gemm: host_counts and host_offsets must be given together");
  if (a.host_counts != nullptr) check_routing(a.host_counts, a.host_offsets, a.experts, a.m_total);
  return e;
}

}  // namespace

void validate(const MoeGemmArgs& a) { validated_entry(a); }

MoeInstantiation select_moe_instantiation(const MoeGemmArgs& a) {
  const Entry& e = find_entry(a);
  const km::KernelInfo k = entry_info(e, a.quant);
  MoeInstantiation r;
  r.name = e.name;
  r.block_m = k.tile.block_m;
  r.block_n = k.tile.block_n;
  r.block_k = k.tile.block_k;
  r.stages = k.tile.stages;
  r.consumer_warpgroups = k.tile.consumer_warpgroups;
  r.cluster_m = k.tile.cluster_m;
  r.cluster_n = k.tile.cluster_n;
  r.threads = k.threads;
  r.smem_bytes = k.smem_bytes;
  r.producer_regs = k.producer_regs;
  r.consumer_regs = k.consumer_regs;
  r.schedule = schedule_run(e, a);
  return r;
}

void moe_gemm(const MoeGemmArgs& a, cudaStream_t stream) {
  const Entry& e = validated_entry(a);
  if (a.m_total == 0) return;
  const cudaError_t err = e.launch(to_w4a8_params(a, e), stream);
  if (err != cudaSuccess)
    throw Error(fmt::format("moe gemm: launching {} (experts {}, m_total {}, n {}, k {}) failed: {}", e.name,
                            a.experts, a.m_total, a.n, a.k, cudaGetErrorString(err)));
}

double moe_gemm_flops(const MoeGemmArgs& a, long long rows) {
  return 2.0 * static_cast<double>(rows) * a.n * a.k;
}

}  // namespace xstage::ops
