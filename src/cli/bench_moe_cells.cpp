#include "cli/bench_moe_cells.hpp"

#include <fmt/format.h>

#include "xstage/error.hpp"

namespace xstage::cli {

MoeBenchWeights parse_moe_bench_weights(const std::string& w) {
  using L = ops::MoeWeightLayout;
  if (w == "w8a8") return {w, ops::MoeQuant::w8a8};
  if (w == "w4a8-int4") return {w, ops::MoeQuant::w4a8_int4};
  if (w == "w4a8-mxfp4") return {w, ops::MoeQuant::w4a8_mxfp4};
  if (w == "w4a8-int4-lut-rs") return {w, ops::MoeQuant::w4a8_int4, L::int4_rs_lut};
  if (w == "w4a8-mxfp4-rs") return {w, ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs};
  if (w == "w4a8-int4-lut-rs-tok") return {w, ops::MoeQuant::w4a8_int4, L::int4_rs_lut, true};
  if (w == "w4a8-mxfp4-rs-tok") return {w, ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs, true};
  throw InvalidArgument(fmt::format("bench moe: unknown weights '{}' ({})", w, kMoeBenchWeightList));
}

std::string moe_bench_skip_reason(const MoeBenchWeights& w, bool fused, moe::MegaTile tile, bool rs_built,
                                  bool tok_built, bool wide_built) {
  const bool rs = w.layout != ops::MoeWeightLayout::rows;
  if (!fused) {
    // The unfused layer runs register-operand layouts per 128 for INT4 two-level only.
    if (rs && !w.per_token && w.layout == ops::MoeWeightLayout::mxfp4_rs)
      return "no per-128 register-operand MXFP4 grouped GEMM ships";
    return "";
  }
  if (w.per_token) {  // the fused per-token kernel, its own tile only
    if (!tok_built)
      return "this build leaves out the per-token W4A8 kernel: configure with -DXSTAGE_MEGA_W4A8_TOK=ON";
    if (tile != moe::MegaTile::automatic && !moe::mega_tile_is_tok(tile))
      return fmt::format("per-token activations run the per-token tiles only (m256n128_tok, m128n256_tok), not {}",
                         moe::mega_tile_name(tile));
    if (tile == moe::MegaTile::m128n256_tok && !wide_built)
      return "this build leaves out the wide per-token tile: configure with -DXSTAGE_MEGA_TOK_WIDE=ON";
    return "";
  }
  if (moe::mega_tile_is_tok(tile)) return fmt::format("{} runs per-token activations only", moe::mega_tile_name(tile));
  if (rs && !rs_built)
    return "this build leaves out the register-operand W4A8 kernel: configure with -DXSTAGE_MEGA_W4A8_RS=ON";
  if (w.quant != ops::MoeQuant::w8a8 && tile == moe::MegaTile::m128n256) return "W4A8 runs the 64 x 256 tile only";
  return "";
}

}  // namespace xstage::cli
