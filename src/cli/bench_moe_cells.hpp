// The cells of `xstage bench moe` (src/cli/cmd_bench_moe.cpp): its weight formats by name, and
// which (weights, variant) cells a build runs -- kept apart from the bench so the CPU tests check
// the skip rules without a GPU (tests/cpu/test_bench_moe_cells.cpp).
#pragma once
#include <string>

#include "xstage/mega_tile.hpp"
#include "xstage/ops/moe_gemm.hpp"

namespace xstage::cli {

// A weight format of the layer bench (the PyTorch baseline names W4A8 rows "w4a8": it runs them in
// FP8); the *-rs names are the register-operand layouts (bench_moe_rs_weights.hpp), *-rs-tok the
// same with per-token activations (EpMoeRankInputs::act = per_token).
struct MoeBenchWeights {
  std::string name;
  ops::MoeQuant quant = ops::MoeQuant::w8a8;
  ops::MoeWeightLayout layout = ops::MoeWeightLayout::rows;
  bool per_token = false;
  ops::MoeActScales act() const { return per_token ? ops::MoeActScales::per_token : ops::MoeActScales::per_128; }
};
inline constexpr const char* kMoeBenchWeightList =
    "w8a8, w4a8-int4, w4a8-mxfp4, w4a8-int4-lut-rs, w4a8-mxfp4-rs, w4a8-int4-lut-rs-tok, w4a8-mxfp4-rs-tok";
// InvalidArgument for an unknown name.
MoeBenchWeights parse_moe_bench_weights(const std::string& name);

// Why the cell of weights `w` and one variant does not run, or "" when it runs. fused: a Mega-MoE
// variant (else the unfused layer); tile: the tile it asks for (its +TILE suffix or --mega-tile;
// automatic: the layer's choice); rs_built / tok_built: whether this build has the fused
// register-operand kernel (MegaMoeLayer::register_operand_w4a8_built) and the fused per-token one
// (MegaMoeLayer::per_token_w4a8_built), wide_built its wide tile (per_token_wide_built). The
// reason is one line, for "VARIANT skipped for WEIGHTS weights (REASON)".
std::string moe_bench_skip_reason(const MoeBenchWeights& w, bool fused, moe::MegaTile tile, bool rs_built,
                                  bool tok_built, bool wide_built = false);

}  // namespace xstage::cli
