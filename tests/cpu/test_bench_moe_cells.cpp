// Which cells `xstage bench moe` runs (src/cli/bench_moe_cells.*): weight names, and the skip rules
// of every weights x variant x build combination -- a per-token fused cell runs in a build with the
// per-token kernel whatever the register-operand kernel's option, and a skipped cell names why.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <string>

#include "cli/bench_moe_cells.hpp"
#include "xstage/error.hpp"

using namespace xstage;
using cli::moe_bench_skip_reason;
using cli::parse_moe_bench_weights;
using moe::MegaTile;

TEST(BenchMoeCells, WeightNamesParse) {
  const auto tok = parse_moe_bench_weights("w4a8-mxfp4-rs-tok");
  EXPECT_EQ(tok.quant, ops::MoeQuant::w4a8_mxfp4);
  EXPECT_EQ(tok.layout, ops::MoeWeightLayout::mxfp4_rs);
  EXPECT_TRUE(tok.per_token);
  EXPECT_EQ(tok.act(), ops::MoeActScales::per_token);
  const auto rs = parse_moe_bench_weights("w4a8-int4-lut-rs");
  EXPECT_EQ(rs.layout, ops::MoeWeightLayout::int4_rs_lut);
  EXPECT_FALSE(rs.per_token);
  EXPECT_EQ(rs.act(), ops::MoeActScales::per_128);
  EXPECT_EQ(parse_moe_bench_weights("w8a8").layout, ops::MoeWeightLayout::rows);
  try {
    parse_moe_bench_weights("w4a8-int3");
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("w4a8-int4-lut-rs-tok"), std::string::npos) << e.what();
  }
}

TEST(BenchMoeCells, PerTokenFusedCellsRunWithThePerTokenKernelOnly) {
  for (const char* name : {"w4a8-int4-lut-rs-tok", "w4a8-mxfp4-rs-tok"}) {
    SCOPED_TRACE(name);
    const auto w = parse_moe_bench_weights(name);
    for (bool rs_built : {false, true}) {
      // Built: the automatic tile runs, whether or not the register-operand kernel is built.
      EXPECT_EQ(moe_bench_skip_reason(w, true, MegaTile::automatic, rs_built, true), "");
      // Not built: skipped, naming the option.
      const std::string off = moe_bench_skip_reason(w, true, MegaTile::automatic, rs_built, false);
      EXPECT_NE(off.find("-DXSTAGE_MEGA_W4A8_TOK=ON"), std::string::npos) << off;
      EXPECT_EQ(off.find('\n'), std::string::npos);
      // A forced W8A8 tile (+m64n256, +m128n256 or --mega-tile): skipped, naming the per-token tiles.
      for (MegaTile t : {MegaTile::m64n256, MegaTile::m128n256}) {
        const std::string forced = moe_bench_skip_reason(w, true, t, rs_built, true);
        EXPECT_NE(forced.find("per-token tiles only"), std::string::npos) << forced;
        EXPECT_NE(forced.find(moe::mega_tile_name(t)), std::string::npos) << forced;
      }
      // The per-token tiles run; the wide one only where it is built (else its option is named).
      EXPECT_EQ(moe_bench_skip_reason(w, true, MegaTile::m256n128_tok, rs_built, true), "");
      EXPECT_EQ(moe_bench_skip_reason(w, true, MegaTile::m128n256_tok, rs_built, true, true), "");
      EXPECT_NE(moe_bench_skip_reason(w, true, MegaTile::m128n256_tok, rs_built, true, false).find(
                    "-DXSTAGE_MEGA_TOK_WIDE=ON"),
                std::string::npos);
      // The unfused layer runs per-token weights of both formats in any build.
      for (bool tok_built : {false, true})
        EXPECT_EQ(moe_bench_skip_reason(w, false, MegaTile::automatic, rs_built, tok_built), "");
    }
  }
}

TEST(BenchMoeCells, Per128CellsKeepTheirRules) {
  const auto int4_rs = parse_moe_bench_weights("w4a8-int4-lut-rs"), mx_rs = parse_moe_bench_weights("w4a8-mxfp4-rs");
  for (bool tok_built : {false, true}) {
    // Fused register-operand cells: gated on the register-operand kernel, not the per-token one.
    for (const auto& w : {int4_rs, mx_rs}) {
      EXPECT_EQ(moe_bench_skip_reason(w, true, MegaTile::automatic, true, tok_built), "");
      EXPECT_NE(moe_bench_skip_reason(w, true, MegaTile::automatic, false, tok_built).find("-DXSTAGE_MEGA_W4A8_RS=ON"),
                std::string::npos);
      EXPECT_NE(moe_bench_skip_reason(w, true, MegaTile::m128n256, true, tok_built).find("64 x 256 tile only"),
                std::string::npos);
      EXPECT_EQ(moe_bench_skip_reason(w, true, MegaTile::m64n256, true, tok_built), "");
      // The per-token tiles: per-token activations only.
      for (MegaTile t : {MegaTile::m256n128_tok, MegaTile::m128n256_tok})
        EXPECT_NE(moe_bench_skip_reason(w, true, t, true, tok_built, true).find("per-token activations only"),
                  std::string::npos);
    }
    // Unfused: INT4 two-level only (no per-128 register-operand MXFP4 grouped GEMM).
    EXPECT_EQ(moe_bench_skip_reason(int4_rs, false, MegaTile::automatic, false, tok_built), "");
    EXPECT_NE(moe_bench_skip_reason(mx_rs, false, MegaTile::automatic, true, tok_built).find("MXFP4"), std::string::npos);
    // Row layouts: W8A8 runs every tile; W4A8 not the 128 x 256 one; nothing depends on the options.
    for (bool rs_built : {false, true}) {
      const auto w8 = parse_moe_bench_weights("w8a8"), int4 = parse_moe_bench_weights("w4a8-int4");
      for (MegaTile t : {MegaTile::automatic, MegaTile::m64n256, MegaTile::m128n256})
        EXPECT_EQ(moe_bench_skip_reason(w8, true, t, rs_built, tok_built), "") << moe::mega_tile_name(t);
      EXPECT_EQ(moe_bench_skip_reason(int4, true, MegaTile::automatic, rs_built, tok_built), "");
      EXPECT_NE(moe_bench_skip_reason(int4, true, MegaTile::m128n256, rs_built, tok_built), "");
      EXPECT_EQ(moe_bench_skip_reason(int4, false, MegaTile::m128n256, rs_built, tok_built), "");
    }
  }
}
#endif  // XSTAGE_HAVE_MOE
