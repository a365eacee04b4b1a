// MoE grouped-GEMM operator: validation, block-M planning, choice of the compiled
// instantiation, launch. No device code here: the kernels are reached through
// kernels/moe/launch.hpp.
#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "kernels/moe/launch.hpp"
#include "kernels/moe/launch_w4a8.hpp"
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

using LaunchFn = cudaError_t (*)(const km::MoeGemmParams&, cudaStream_t);
using LaunchW4Fn = cudaError_t (*)(const km::MoeW4A8Params&, cudaStream_t);

// quant w4a8_int4 in the table stands for both 4-bit formats (one kernel serves both).
struct Entry {
  MoeQuant quant;
  MoeEpilogue epilogue;
  int block_m;
  int cluster_m;
  int cluster_n;
  const char* name;
  LaunchFn launch;
  km::KernelInfo (*info)();
  LaunchW4Fn launch_w4 = nullptr;
  km::KernelInfo (*info_w4)(km::W4Format) = nullptr;  // W4A8: the kernel depends on the format
  MoeWeightLayout layout = MoeWeightLayout::rows;
  bool serial_only = false;  // schedules 0 and 2 only (no overlap), default 2
  MoeActScales act = MoeActScales::per_128;
};

km::KernelInfo w4a8rs_bf16_info(km::W4Format) { return km::moe_w4a8rs_bf16_m128n128_info(); }
km::KernelInfo w4a8rs_bf16_m256_info(km::W4Format) { return km::moe_w4a8rs_bf16_m256n128_info(); }
km::KernelInfo w4a8rs_swiglu_info(km::W4Format) { return km::moe_w4a8rs_swiglu_m64n256_info(); }
km::KernelInfo w4a8rs_mxfp4_bf16_info(km::W4Format) { return km::moe_w4a8rs_mxfp4_bf16_m128n128_info(); }
km::KernelInfo w4a8rs_mxfp4_bf16_m256_info(km::W4Format) { return km::moe_w4a8rs_mxfp4_bf16_m256n128_info(); }
km::KernelInfo w4a8rs_mxfp4_swiglu_info(km::W4Format) { return km::moe_w4a8rs_mxfp4_swiglu_m64n256_info(); }
km::KernelInfo w4a8rs_lut_bf16_info(km::W4Format) { return km::moe_w4a8rs_lut_bf16_m128n128_info(); }
km::KernelInfo w4a8rs_lut_bf16_m256_info(km::W4Format) { return km::moe_w4a8rs_lut_bf16_m256n128_info(); }
km::KernelInfo w4a8rs_lut_swiglu_info(km::W4Format) { return km::moe_w4a8rs_lut_swiglu_m64n256_info(); }
km::KernelInfo w4a8rs_lut_swiglu_m128_info(km::W4Format) { return km::moe_w4a8rs_lut_swiglu_m128n256_info(); }
km::KernelInfo w4a8rs_lut_tok_bf16_m256_info(km::W4Format) { return km::moe_w4a8rs_lut_tok_bf16_m256n128_info(); }
km::KernelInfo w4a8rs_lut_tok_swiglu_m128_info(km::W4Format) { return km::moe_w4a8rs_lut_tok_swiglu_m128n256_info(); }
km::KernelInfo w4a8rs_lut_tok_glu_info(km::W4Format) { return km::moe_w4a8rs_lut_tok_glu_m256n128_info(); }
km::KernelInfo w4a8rs_mxfp4_tok_bf16_m256_info(km::W4Format) { return km::moe_w4a8rs_mxfp4_tok_bf16_m256n128_info(); }
km::KernelInfo w4a8rs_mxfp4_tok_glu_info(km::W4Format) { return km::moe_w4a8rs_mxfp4_tok_glu_m256n128_info(); }

const Entry kEntries[] = {
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 1, 1, "w8a8_bf16_m128n128", km::moe_w8a8_bf16_m128n128,
     km::moe_w8a8_bf16_m128n128_info},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 2, 1, "w8a8_bf16_m128n128_c2x1", km::moe_w8a8_bf16_m128n128_c2x1,
     km::moe_w8a8_bf16_m128n128_c2x1_info},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 1, 2, "w8a8_bf16_m128n128_c1x2", km::moe_w8a8_bf16_m128n128_c1x2,
     km::moe_w8a8_bf16_m128n128_c1x2_info},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 2, 2, "w8a8_bf16_m128n128_c2x2", km::moe_w8a8_bf16_m128n128_c2x2,
     km::moe_w8a8_bf16_m128n128_c2x2_info},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 1, 1, "w8a8_bf16_m128n192", km::moe_w8a8_bf16_m128n192,
     km::moe_w8a8_bf16_m128n192_info, nullptr, nullptr, MoeWeightLayout::rows, true},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 2, 1, "w8a8_bf16_m128n192_c2x1", km::moe_w8a8_bf16_m128n192_c2x1,
     km::moe_w8a8_bf16_m128n192_c2x1_info, nullptr, nullptr, MoeWeightLayout::rows, true},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 1, 1, "w8a8_bf16_m128n256", km::moe_w8a8_bf16_m128n256,
     km::moe_w8a8_bf16_m128n256_info, nullptr, nullptr, MoeWeightLayout::rows, true},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 128, 2, 1, "w8a8_bf16_m128n256_c2x1", km::moe_w8a8_bf16_m128n256_c2x1,
     km::moe_w8a8_bf16_m128n256_c2x1_info, nullptr, nullptr, MoeWeightLayout::rows, true},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 64, 1, 1, "w8a8_bf16_m64n256", km::moe_w8a8_bf16_m64n256,
     km::moe_w8a8_bf16_m64n256_info},
    {MoeQuant::w8a8, MoeEpilogue::bf16, 192, 1, 1, "w8a8_bf16_m192n128", km::moe_w8a8_bf16_m192n128,
     km::moe_w8a8_bf16_m192n128_info},
    {MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, 64, 1, 1, "w8a8_swiglu_m64n256", km::moe_w8a8_swiglu_m64n256,
     km::moe_w8a8_swiglu_m64n256_info},
    {MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, 64, 2, 1, "w8a8_swiglu_m64n256_c2x1", km::moe_w8a8_swiglu_m64n256_c2x1,
     km::moe_w8a8_swiglu_m64n256_c2x1_info},
    {MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, 128, 1, 1, "w8a8_swiglu_m128n128", km::moe_w8a8_swiglu_m128n128,
     km::moe_w8a8_swiglu_m128n128_info},
    {MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, 128, 1, 1, "w8a8_swiglu_m128n256", km::moe_w8a8_swiglu_m128n256,
     km::moe_w8a8_swiglu_m128n256_info, nullptr, nullptr, MoeWeightLayout::rows, true},
    {MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, 128, 2, 1, "w8a8_swiglu_m128n256_c2x1", km::moe_w8a8_swiglu_m128n256_c2x1,
     km::moe_w8a8_swiglu_m128n256_c2x1_info, nullptr, nullptr, MoeWeightLayout::rows, true},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 192, 1, 1, "w4a8_bf16_m192n128", nullptr, nullptr,
     km::moe_w4a8_bf16_m192n128, km::moe_w4a8_bf16_m192n128_info},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 64, 1, 1, "w4a8_bf16_m64n256", nullptr, nullptr, km::moe_w4a8_bf16_m64n256,
     km::moe_w4a8_bf16_m64n256_info},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 64, 1, 1, "w4a8_swiglu_m64n256", nullptr, nullptr,
     km::moe_w4a8_swiglu_m64n256, km::moe_w4a8_swiglu_m64n256_info},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 128, 1, 1, "w4a8rs_bf16_m128n128", nullptr, nullptr,
     km::moe_w4a8rs_bf16_m128n128, w4a8rs_bf16_info, MoeWeightLayout::int4_rs},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 256, 1, 1, "w4a8rs_bf16_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_bf16_m256n128, w4a8rs_bf16_m256_info, MoeWeightLayout::int4_rs},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 64, 1, 1, "w4a8rs_swiglu_m64n256", nullptr, nullptr,
     km::moe_w4a8rs_swiglu_m64n256, w4a8rs_swiglu_info, MoeWeightLayout::int4_rs},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 128, 1, 1, "w4a8rs_mxfp4_bf16_m128n128", nullptr, nullptr,
     km::moe_w4a8rs_mxfp4_bf16_m128n128, w4a8rs_mxfp4_bf16_info, MoeWeightLayout::mxfp4_rs},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 256, 1, 1, "w4a8rs_mxfp4_bf16_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_mxfp4_bf16_m256n128, w4a8rs_mxfp4_bf16_m256_info, MoeWeightLayout::mxfp4_rs},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 64, 1, 1, "w4a8rs_mxfp4_swiglu_m64n256", nullptr, nullptr,
     km::moe_w4a8rs_mxfp4_swiglu_m64n256, w4a8rs_mxfp4_swiglu_info, MoeWeightLayout::mxfp4_rs},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 128, 1, 1, "w4a8rs_lut_bf16_m128n128", nullptr, nullptr,
     km::moe_w4a8rs_lut_bf16_m128n128, w4a8rs_lut_bf16_info, MoeWeightLayout::int4_rs_lut},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 256, 1, 1, "w4a8rs_lut_bf16_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_lut_bf16_m256n128, w4a8rs_lut_bf16_m256_info, MoeWeightLayout::int4_rs_lut},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 64, 1, 1, "w4a8rs_lut_swiglu_m64n256", nullptr, nullptr,
     km::moe_w4a8rs_lut_swiglu_m64n256, w4a8rs_lut_swiglu_info, MoeWeightLayout::int4_rs_lut},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 128, 1, 1, "w4a8rs_lut_swiglu_m128n256", nullptr, nullptr,
     km::moe_w4a8rs_lut_swiglu_m128n256, w4a8rs_lut_swiglu_m128_info, MoeWeightLayout::int4_rs_lut},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 256, 1, 1, "w4a8rs_lut_tok_bf16_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_lut_tok_bf16_m256n128, w4a8rs_lut_tok_bf16_m256_info, MoeWeightLayout::int4_rs_lut, false,
     MoeActScales::per_token},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 128, 1, 1, "w4a8rs_lut_tok_swiglu_m128n256", nullptr, nullptr,
     km::moe_w4a8rs_lut_tok_swiglu_m128n256, w4a8rs_lut_tok_swiglu_m128_info, MoeWeightLayout::int4_rs_lut, false,
     MoeActScales::per_token},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 256, 1, 2, "w4a8rs_lut_tok_glu_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_lut_tok_glu_m256n128, w4a8rs_lut_tok_glu_info, MoeWeightLayout::int4_rs_lut_glu, false,
     MoeActScales::per_token},
    {MoeQuant::w4a8_int4, MoeEpilogue::bf16, 256, 1, 1, "w4a8rs_mxfp4_tok_bf16_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_mxfp4_tok_bf16_m256n128, w4a8rs_mxfp4_tok_bf16_m256_info, MoeWeightLayout::mxfp4_rs, false,
     MoeActScales::per_token},
    {MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 256, 1, 2, "w4a8rs_mxfp4_tok_glu_m256n128", nullptr, nullptr,
     km::moe_w4a8rs_mxfp4_tok_glu_m256n128, w4a8rs_mxfp4_tok_glu_info, MoeWeightLayout::mxfp4_rs_glu, false,
     MoeActScales::per_token},
};


MoeQuant table_quant(MoeQuant q) { return moe_is_w4a8(q) ? MoeQuant::w4a8_int4 : q; }

// SwiGLU tile height: the 128 x 256 tile from 256 tokens per expert when the shape is unknown
// (plan_block_m), and its rate per row over the 64 x 256 tile when whole waves are counted
// (plan_swiglu_block_m; 1.06-1.11x where waves are many: docs/moe-gemm.md §Design, SwiGLU height).
constexpr int kSwiGluWideMinTokens = 256;
constexpr double kSwiGluWideRate = 1.1;

// SwiGLU on 128-row tiles: the 128 x 256 tile (gate and up per warp group, schedule 2), or the
// two-pass 128 x 128 tile where a schedule with the overlap bit is forced (no room for it on
// 128 x 256). The 128 x 256 tile beat the two-pass one on DiT-MoE-G at every count measured,
// 128-8192 tokens per expert (docs/moe-gemm.md §Design), so the two-pass tile is no longer
// planned otherwise.
int plan_swiglu_width(int schedule) { return schedule >= 0 && (schedule & 1) ? 128 : 256; }

// The register-operand W4A8 layouts: SwiGLU on 64 x 256; bf16 on 256-token tiles from 1024 tokens
// per expert (each converted weight fragment serves two 128-token pieces: 1.012-1.059x of the
// 128-token tile for int4, 1.059-1.108x for mxfp4, on all 28 cells at 1024 and 8192 tokens;
// not measured below: docs/moe-gemm-w4a8.md §256-token tiles), else 128.
// The int4_rs_lut layout also has a 128-token SwiGLU tile (two 64-token pieces per converted
// fragment), planned from the same count.
constexpr int kW4RsTallMinTokens = 1024;
int plan_rs_block_m(MoeWeightLayout layout, MoeEpilogue epilogue, int tokens) {
  if (epilogue == MoeEpilogue::swiglu_fp8)
    return layout == MoeWeightLayout::int4_rs_lut && tokens >= kW4RsTallMinTokens ? 128 : 64;
  return tokens >= kW4RsTallMinTokens ? 256 : 128;
}

// Passes of the persistent grid over `tiles` equal tiles (each of `ctas` CTAs takes tiles in
// turn): what the tile plans compare, a partial last wave counted whole.
double whole_waves(long long tiles, int ctas) { return static_cast<double>((tiles + ctas - 1) / ctas); }

int tokens_per_expert(const MoeGemmArgs& a) {
  if (a.tokens_per_expert_hint > 0) return a.tokens_per_expert_hint;
  return a.experts > 0 ? a.m_total / a.experts : 0;
}

// The multicast clusters are shipped for forcing; one shape is chosen here: 2 x 1 for a w8a8
// SwiGLU 64 x 256 tile (the B chunks shared by two m-blocks) from 8192 tokens per expert, where
// it was 1.013-1.029x of 1 x 1 on six of the seven models (DiT-MoE-G 0.996); at 1024 tokens it
// was 0.969-1.023x (five of seven slower), and bf16 tiles gained nothing.
// The 128 x 256 SwiGLU tile is planned at such counts (plan_swiglu_block_m), so this applies
// where 64 rows are forced, or where whole waves make them the plan. (The planned 128 x 192
// bf16 tile's 2 x 1 is set in find_entry.)
// The 128 x 256 tiles (bf16, and SwiGLU gate + up) run in 2 x 1 clusters from 1024 tokens per
// expert: at 8192 tokens 1.008-1.044x of 1 x 1 on all 21 bf16 and SwiGLU shapes, at 1024
// 0.989-1.032x (15 of 21 faster, the slower ones within 1.1 %).
// Measurements: docs/moe-gemm.md §Design (cluster planning),
// docs/perf-log.md §MoE grouped GEMM, W8A8.
bool dual_in_clusters(int block_m, int block_n, int tokens) { return block_m == 128 && block_n == 256 && tokens >= 1024; }

MoeCluster cluster_for(MoeQuant quant, MoeWeightLayout layout, MoeEpilogue epilogue, int tokens, int block_m) {
  if (quant == MoeQuant::w8a8 && layout == MoeWeightLayout::rows && epilogue == MoeEpilogue::swiglu_fp8 &&
      block_m == 64 && tokens >= 8192)
    return MoeCluster{2, 1};
  return MoeCluster{1, 1};
}

km::W4Format w4_format(MoeQuant q) { return q == MoeQuant::w4a8_mxfp4 ? km::W4Format::mxfp4 : km::W4Format::int4_g128; }

km::KernelInfo entry_info(const Entry& e, MoeQuant q) { return e.info_w4 != nullptr ? e.info_w4(w4_format(q)) : e.info(); }

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

std::string shipped_tiles(const MoeGemmArgs& a) {
  if (a.a_scale_granularity == MoeActScales::per_token)
    return "per-token activation scales ship with int4_rs_lut (bf16 m256n128 1x1, swiglu_fp8 m128n256 1x1), "
           "int4_rs_lut_glu (swiglu_fp8 m256n128 1x2), mxfp4_rs (bf16 m256n128 1x1) and mxfp4_rs_glu "
           "(swiglu_fp8 m256n128 1x2)";
  if (a.b_layout != MoeWeightLayout::rows)
    return fmt::format("the {} layout ships: bf16 m128n128 1x1, bf16 m256n128 1x1, swiglu_fp8 m64n256 1x1{}",
                       moe_weight_layout_name(a.b_layout),
                       a.b_layout == MoeWeightLayout::int4_rs_lut ? ", swiglu_fp8 m128n256 1x1" : "");
  if (moe_is_w4a8(a.quant)) return "w4a8 ships: bf16 m64n256 1x1, bf16 m192n128 1x1, swiglu_fp8 m64n256 1x1";
  return "w8a8 ships: bf16 m64n256 1x1, bf16 m128n128 1x1/2x1/1x2/2x2, bf16 m128n192 1x1/2x1, "
         "bf16 m128n256 1x1/2x1, bf16 m192n128 1x1, swiglu_fp8 m64n256 1x1/2x1, swiglu_fp8 m128n128 1x1, "
         "swiglu_fp8 m128n256 1x1/2x1";
}

const Entry& find_entry(const MoeGemmArgs& a) {
  const int tokens = tokens_per_expert(a);
  const bool rs = a.b_layout != MoeWeightLayout::rows;
  const bool swiglu_w8 = !rs && a.quant == MoeQuant::w8a8 && a.epilogue == MoeEpilogue::swiglu_fp8;
  const bool per_token = a.a_scale_granularity == MoeActScales::per_token;
  int bm = a.block_m != 0 ? a.block_m
           : per_token    ? (a.epilogue == MoeEpilogue::swiglu_fp8 && a.b_layout == MoeWeightLayout::int4_rs_lut
                                 ? 128
                                 : 256)  // its two-piece tiles
           : rs           ? plan_rs_block_m(a.b_layout, a.epilogue, tokens)
           : swiglu_w8    ? plan_swiglu_block_m(tokens, a.experts, a.n, grid_ctas(a))
                          : plan_block_m(a.quant, a.epilogue, tokens, a.k);
  if (a.block_m == 0 && !rs && a.block_n != 0)  // a forced width picks the height it ships with
    bm = a.block_n == 256 ? 64 : a.block_n == 192 ? 128 : (bm == 64 ? 128 : bm);
  MoeCluster c = a.cluster_m != 0 ? MoeCluster{a.cluster_m, a.cluster_n}
                                  : cluster_for(a.quant, a.b_layout, a.epilogue, tokens, bm);
  // The interleaved SwiGLU tiles always run in 1 x 2 clusters (the pair shares the token amax).
  if (a.cluster_m == 0 && moe_layout_is_glu(a.b_layout)) c = MoeCluster{1, 2};
  // Width: forced, or planned where two widths are shipped for one height (w8a8 bf16 128 x 1x1).
  const bool choice = !rs && a.quant == MoeQuant::w8a8 && a.epilogue == MoeEpilogue::bf16 && bm == 128 && c.m == 1 &&
                      c.n == 1;
  // SwiGLU on 128-row tiles: the 128 x 256 tile (gate and up per warp group), or the two-pass
  // 128 x 128 tile where an overlap schedule is forced (the 128 x 256 one has no room for it).
  const bool swiglu128 = swiglu_w8 && bm == 128;
  const int bn = a.block_n != 0 ? a.block_n
                 : choice       ? plan_block_n(a.quant, a.epilogue, bm, tokens, a.experts, a.n, grid_ctas(a), a.schedule)
                 : swiglu128    ? plan_swiglu_width(a.schedule)
                                : 0;
  // The planned 128 x 192 tile runs in 2 x 1 clusters (B multicast to two m-blocks): 1.018-1.047x
  // of 1 x 1 on all 14 bf16 shapes at 8192 tokens, 0.994-1.031x at 1024 (docs/moe-gemm.md §Design).
  if (choice && bn == 192 && a.cluster_m == 0) c = MoeCluster{2, 1};
  if (a.cluster_m == 0 && !rs && a.quant == MoeQuant::w8a8 && dual_in_clusters(bm, bn, tokens)) c = MoeCluster{2, 1};
  for (const Entry& e : kEntries)
    if (e.quant == table_quant(a.quant) && e.epilogue == a.epilogue && e.block_m == bm && e.cluster_m == c.m &&
        e.cluster_n == c.n && e.layout == a.b_layout && e.act == a.a_scale_granularity &&
        (bn == 0 || entry_info(e, a.quant).tile.block_n == bn)) {
      if (e.serial_only && a.schedule >= 0 && (a.schedule & 1))
        throw InvalidArgument(fmt::format("moe gemm: the {} kernel has schedules 0 and 2 (ping-pong, its default); "
                                          "schedule {} needs the overlap bit (no room for a second accumulator)",
                                          e.name, a.schedule));
      return e;
    }
  throw InvalidArgument(fmt::format("moe gemm: no {} {} kernel with block_m {}{} and cluster {}x{} ({})",
                                    moe_quant_name(a.quant), moe_epilogue_name(a.epilogue), bm,
                                    a.block_n != 0 ? fmt::format(", block_n {}", a.block_n) : std::string(), c.m, c.n,
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

int plan_block_m(MoeEpilogue epilogue, int tokens) {
  if (tokens <= 64) return 64;
  // SwiGLU without the problem's shape: the 128 x 256 tile from 256 tokens (faster than 64 x 256
  // on all seven models at 256-8192 tokens), 64 x 256 below (where whole waves decide:
  // plan_swiglu_block_m).
  if (epilogue == MoeEpilogue::swiglu_fp8) return tokens >= kSwiGluWideMinTokens ? 128 : 64;
  // 128 x 128 (two consumer warp groups, next K block's wgmmas issued before the promotion):
  // fastest in 35 of 42 bf16 cells at 1024 and 8192 tokens (docs/moe-gemm.md §Design, block-M
  // planning); the 192-row tile stays shipped for forcing (where 192 or 64 won, by <= 6 %).
  return 128;
}

int plan_swiglu_block_m(int tokens, int experts, int n, int ctas) {
  if (tokens <= 64) return 64;
  if (experts <= 0 || n <= 0 || ctas <= 0) return plan_block_m(MoeEpilogue::swiglu_fp8, tokens);
  // Both tiles span 256 weight columns; a 128-row tile does the work of two 64-row ones at
  // kSwiGluWideRate times their rate.
  const long long n_blocks = (n + 255) / 256;
  auto waves = [&](int rows) {
    return whole_waves(static_cast<long long>(experts) * ((tokens + rows - 1) / rows) * n_blocks, ctas);
  };
  return waves(128) * 2.0 / kSwiGluWideRate <= waves(64) ? 128 : 64;
}

int plan_block_n(MoeQuant quant, MoeEpilogue epilogue, int block_m, int tokens, int experts, int n, int ctas,
                 int schedule) {
  constexpr int kWideMinTokens = 1024;
  if (quant != MoeQuant::w8a8 || epilogue != MoeEpilogue::bf16 || block_m != 128) return block_m == 64 ? 256 : 128;
  // Below 1024 tokens per expert the wider tile lost in 18 of 28 cells at 128 and 256 tokens
  // (0.77-1.05x; few K-block waves, the weights' bytes dominate): 128.
  if ((schedule >= 0 && (schedule & 1)) || tokens < kWideMinTokens || experts <= 0 || n <= 0 || ctas <= 0) return 128;
  // Rate of 128 x 192 (schedule 2) over 128 x 128 (schedule 3) per tile column, with waves
  // counted as below: median 1.094 at 1024 and 1.052 at 8192 tokens per expert over the 14 bf16
  // shapes of the seven models. Any rate in [1.06, 1.10] plans the faster tile in 27
  // of those 28 cells (the 28th: DiT-MoE-G Linear-2 at 1024, n = 1408, 0.7 % slower).
  constexpr double kWideRate = 1.07;
  const long long m_blocks = static_cast<long long>(experts) * ((tokens + 127) / 128);
  auto waves = [&](int width) { return whole_waves(m_blocks * ((n + width - 1) / width), ctas); };
  // 128 x 256 (two 128-column pieces per warp group, 1 x 1) over the planned 128 x 192 in 2 x 1
  // clusters: median 1.022 over the 28 cells; 1.01-1.04 where both widths fill their waves
  // alike: rate 1.09 (~1.07 x 1.02). Since the 128 x 256 tile runs in 2 x 1 clusters too (from
  // 1024 tokens; median 1.02 over 1 x 1 at 8192) the rate is 1.11. It keeps the narrower tile
  // where 256-wide tiles pad a wave. Measurements: docs/moe-gemm.md §Design (block-N planning),
  // docs/perf-log.md §MoE grouped GEMM, W8A8.
  constexpr double kWidestRate = 1.11;
  const double t128 = waves(128) * 128.0;
  const double t192 = waves(192) * 192.0 / kWideRate;
  const double t256 = waves(256) * 256.0 / kWidestRate;
  if (t256 <= t192 && t256 < t128) return 256;
  return t192 < t128 ? 192 : 128;
}

int plan_block_m(MoeQuant quant, MoeEpilogue epilogue, int tokens, int /*k*/) {
  if (!moe_is_w4a8(quant)) return plan_block_m(epilogue, tokens);
  // w4a8: 64 x 256 for few tokens and for SwiGLU, else the 192-row tile (no 128-row tile).
  if (epilogue == MoeEpilogue::swiglu_fp8 || tokens <= 64) return 64;
  return 192;
}

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

MoeCluster plan_cluster(MoeEpilogue epilogue, int tokens) {
  const int bm = plan_block_m(epilogue, tokens);
  // Without a shape the SwiGLU 128-row tile is the 128 x 256 one (bf16 plans width 128 then).
  const int bn = epilogue == MoeEpilogue::swiglu_fp8 && bm == 128 ? plan_swiglu_width(-1) : 128;
  if (dual_in_clusters(bm, bn, tokens)) return MoeCluster{2, 1};
  return cluster_for(MoeQuant::w8a8, MoeWeightLayout::rows, epilogue, tokens, bm);
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
  const cudaError_t err =
      e.launch_w4 != nullptr ? e.launch_w4(to_w4a8_params(a, e), stream) : e.launch(to_params(a, e), stream);
  if (err != cudaSuccess)
    throw Error(fmt::format("moe gemm: launching {} (experts {}, m_total {}, n {}, k {}) failed: {}", e.name,
                            a.experts, a.m_total, a.n, a.k, cudaGetErrorString(err)));
}

double moe_gemm_flops(const MoeGemmArgs& a, long long rows) {
  return 2.0 * static_cast<double>(rows) * a.n * a.k;
}

}  // namespace xstage::ops
