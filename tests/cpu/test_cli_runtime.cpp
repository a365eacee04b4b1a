// The xstage binary's runtime commands on a machine without a GPU (CI): clear errors and
// exit codes, never a crash; bad probe flags are refused before any GPU is needed.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <initializer_list>
#include <string>

namespace {
struct Run {
  int code;
  std::string out;
};
Run run(const std::string& args) {
  std::string cmd = std::string(XSTAGE_BIN) + " " + args + " 2>&1";
  std::array<char, 4096> buf{};
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// A bad flag of `command`: exit status 2 and a message that contains `says`.
struct Refusal {
  const char* args;
  const char* says;
};
void expect_refusals(const std::string& command, std::initializer_list<Refusal> cases) {
  for (const Refusal& c : cases) {
    auto r = run(command + " " + c.args);
    EXPECT_EQ(r.code, 2) << command << " " << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << command << " " << c.args << ": " << r.out;
  }
}
}  // namespace

TEST(Cli, HelpListsEveryCommand) {
  auto r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* c : {"info", "probe", "fit", "predict"}) EXPECT_NE(r.out.find(c), std::string::npos) << c;
  auto p = run("probe --help");
  EXPECT_EQ(p.code, 0);
  EXPECT_NE(p.out.find("--burst-bytes"), std::string::npos);
}

TEST(Cli, InfoWithoutGpuSaysSoAndShowsTheModel) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present; the no-GPU path is for CI machines";
  auto r = run("info");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("no CUDA GPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted X-Stage"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 x 16 SMs"), std::string::npos) << r.out;
  auto j = run("info --json");
  EXPECT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("\"predictions\""), std::string::npos) << j.out;
}

TEST(Cli, VirtualRanksAreRefusedBeforeTouchingAGpu) {
  expect_refusals("probe", {{"--virtual-ranks 9", "1..8"}, {"--virtual-ranks -1", "1..8"}});
#ifdef XSTAGE_HAVE_ULYSSES
  // 12 heads or 1020 rows cannot be split over 8 ranks; 9 ranks is too many.
  expect_refusals("bench ulysses", {{"--virtual-ranks 8 --configs 12x128 -S 4096", "cannot be split"},
                                    {"--virtual-ranks 8 --configs 16x128 -S 1020", "not divisible"},
                                    {"--virtual-ranks 9", "1..8"}});
#endif
#ifdef XSTAGE_HAVE_MOE
  expect_refusals("bench moe", {{"--virtual-ranks 3 --models DiT-MoE-G", "split evenly over 3 ranks"},
                                {"--virtual-ranks 9", "1..8"}});
#endif
}

TEST(Cli, ProbeRefusesBadFlagsBeforeTouchingAGpu) {
  auto b = run("probe --burst-bytes 24");
  EXPECT_EQ(b.code, 2) << b.out;
  EXPECT_NE(b.out.find("multiple of 16"), std::string::npos) << b.out;
  auto g = run("probe --gap-us -1");
  EXPECT_EQ(g.code, 2) << g.out;
  auto s = run("probe --store st.cs");
  EXPECT_EQ(s.code, 2) << s.out;
  EXPECT_NE(s.out.find("st.cs"), std::string::npos) << s.out;
  auto f = run("probe --sweep /nonexistent.json");
  EXPECT_NE(f.code, 0);
}

TEST(Cli, MoeRoutingListsModelsAndRejectsBadInput) {
  auto l = run("moe-routing --list");
  EXPECT_EQ(l.code, 0);
  EXPECT_NE(l.out.find("DSv4-Pro"), std::string::npos) << l.out;
  auto ok = run("moe-routing -m DiT-MoE-G -t 64 --routing skewed");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("hottest expert"), std::string::npos) << ok.out;
  auto bad_model = run("moe-routing -m GPT -t 64");
  EXPECT_EQ(bad_model.code, 2);
  EXPECT_NE(bad_model.out.find("unknown model"), std::string::npos) << bad_model.out;
  auto bad_ranks = run("moe-routing -m Hy3 -t 64 -P 5");
  EXPECT_EQ(bad_ranks.code, 2);
  EXPECT_NE(bad_ranks.out.find("do not split evenly"), std::string::npos) << bad_ranks.out;
  auto bad_kind = run("moe-routing -m Hy3 -t 64 --routing zipf");
  EXPECT_EQ(bad_kind.code, 2);
  auto no_model = run("moe-routing -t 64");
  EXPECT_EQ(no_model.code, 2);
}

// --plan counts the per-token tile's small tails (docs/megamoe.md Next steps 4): with the default
// seed, DiT-MoE-G at 8192 balanced tokens has 73 blocks of <= 256 rows, 8 of them tails of 4-23 rows,
// and 65 blocks with the tails fold (the 8 tails joined to their full blocks).
TEST(Cli, MoeRoutingPlanCountsThePerTokenTails) {
  auto p = run("moe-routing -m DiT-MoE-G -P 1 -t 8192 --plan");
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("per-token W4A8 tile m256n128_tok (73 blocks, 8 of them tails of <= 32 rows"), std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("; 65 blocks in a build with the tails fold, XSTAGE_MEGA_TOK_FOLD=32)"), std::string::npos)
      << p.out;
  auto wide = run("moe-routing -m DSv4-Flash -P 1 -t 512 --plan");
  ASSERT_EQ(wide.code, 0) << wide.out;
  EXPECT_NE(wide.out.find("per-token W4A8 tile m128n256_tok (256 blocks, 0 of them"), std::string::npos) << wide.out;
}

TEST(Cli, UnknownCommandIsAnError) {
  auto r = run("frobnicate");
  EXPECT_NE(r.code, 0);
}

// Flags CLI11 itself refuses (not a number, out of a declared range, unknown) are bad input like
// any other: one line on stderr, exit status 2.
TEST(Cli, FlagParseErrorsAreOneLineAndExit2) {
  expect_refusals("predict", {{"--producers abc", "xstage: error: "}, {"--no-such-flag", "xstage: error: "}});
  expect_refusals("moe-routing", {{"-m DiT-MoE-G -t -5", "xstage: error: "}});
  auto r = run("predict --producers abc");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

#ifdef XSTAGE_HAVE_MOE
TEST(Cli, BenchMoeRefusesBadPointsBeforeTouchingAGpu) {
  expect_refusals("bench moe", {{"--variants interleaved-leadx", "unknown variant 'interleaved-leadx'"},
                                {"--variants interleaved-lead99", "unknown variant 'interleaved-lead99'"},
                                {"--variants interleaved-mix0", "unknown variant 'interleaved-mix0'"},
                                {"--variants interleaved-mix2000", "unknown variant 'interleaved-mix2000'"},
                                {"--variants interleaved-mix1.5", "unknown variant 'interleaved-mix1.5'"},
                                {"--routing-seed -5", "must be >= 0"},
                                {"--variants unfused,turbo", "unknown variant 'turbo'"},
                                {"--iters 5", "must be >= 20"},
                                {"--tokens 0", "tokens 0 must be >= 1"},
                                {"--weights w4a8-foo", "unknown weights 'w4a8-foo'"},
                                {"--models GPT", "unknown model 'GPT'"},
                                {"--gpus 3 --models DiT-MoE-G", "16 experts must split evenly over 3 ranks"}});
}
#endif

#ifdef XSTAGE_HAVE_MOE
TEST(Cli, BenchMoeGemmRefusesBadFlagsBeforeTouchingAGpu) {
  expect_refusals("bench moe-gemm", {{"--iters 5", "--iters 5 must be >= 20"},
                                     {"--warmup -1", "--warmup must be >= 0"},
                                     {"--warmup-ms -1", "--warmup-ms must be in [0, 60000]"},
                                     {"--warmup-ms 90000", "--warmup-ms must be in [0, 60000]"},
                                     {"--tokens 0", "tokens per expert 0 must be >= 1"},
                                     {"--block-m 96", "--block-m 96 must be 0, 64, 128, 192 or 256"},
                                     {"--models GPT", "--models matched none"},
                                     {"--ops l3_bf16", "got 'l3_bf16'"},
                                     {"--cluster 3x1", "got '3x1'"},
                                     {"--weights w4a8-int8", "got 'w4a8-int8'"},
                                     {"--schedule 4", "--schedule 4 must be -1..3"},
                                     {"--block-n 96", "--block-n 96 must be 0, 128, 192 or 256"}});
}

// --plan prints the planned kernel of every line and launches nothing (no GPU needed): for
// DSv4-Pro Linear-1, 128 x 128 at 128 tokens, 128 x 192 in 2 x 1 clusters at 1024, 128 x 256 in
// 2 x 1 clusters at 8192; SwiGLU on 128 x 256 above 64 tokens (2 x 1 from 1024), 64 x 256 up to 64
// (and with 2 x 1 clusters when forced to 64 rows at 8192 tokens); a forced tile that no kernel
// ships for an op is left out.
TEST(Cli, BenchMoeGemmPlanNeedsNoGpu) {
  auto r =
      run("bench moe-gemm --plan --num-ctas 132 --models DSv4-Pro --ops l1_bf16,l1_swiglu --tokens 16,128,1024,8192");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nothing launched"), std::string::npos) << r.out;
  for (const char* k : {"w8a8_bf16_m128n128 ", "w8a8_bf16_m128n192_c2x1", "w8a8_bf16_m128n256_c2x1", "w8a8_swiglu_m64n256 ",
                        "w8a8_swiglu_m128n256 ", "w8a8_swiglu_m128n256_c2x1"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
  auto m64 = run("bench moe-gemm --plan --num-ctas 132 --models DiT-MoE-G --ops l1_swiglu --tokens 8192 --block-m 64");
  EXPECT_EQ(m64.code, 0) << m64.out;
  EXPECT_NE(m64.out.find("w8a8_swiglu_m64n256_c2x1"), std::string::npos) << m64.out;
  auto none = run("bench moe-gemm --plan --models DiT-MoE-G --ops l1_swiglu --block-m 192");
  EXPECT_EQ(none.code, 0) << none.out;
  EXPECT_EQ(none.out.find("w8a8_"), std::string::npos) << none.out;
}
#endif

#ifdef XSTAGE_HAVE_ULYSSES
TEST(Cli, BenchUlyssesRefusesBadPointsBeforeTouchingAGpu) {
  expect_refusals("bench ulysses", {{"--seqlens 1001", "not divisible by 2 ranks"},
                                    {"--configs 25x128", "cannot be split over 2 ranks"},
                                    {"--configs 24x96", "head dim 96"},
                                    {"--configs 24by128", "HEADSxHEAD_DIM"},
                                    {"--configs 24x128x", "HEADSxHEAD_DIM"},
                                    {"--iters 5", "must be >= 20"},
                                    {"--gpus 1", "needs 2..8 ranks"},
                                    {"--dtype fp8", "bf16 or fp16"},
                                    {"--variants fused,turbo", "unknown variant 'turbo'"},
                                    {"--tile wide", "--tile must be staged or long-kv"},
                                    {"--tile long-kv --configs 30x64", "--tile long-kv is a d = 128 tile"},
                                    {"--tile long-kv --variants fused,fused-shaped", "no fused-shaped"},
                                    {"--params /nonexistent/params.json", "/nonexistent/params.json"}});
}
#endif

#ifdef XSTAGE_HAVE_ATTENTION
TEST(Cli, BenchAttentionRefusesBadFlagsBeforeTouchingAGpu) {
  expect_refusals("bench attention", {{"--tile wide", "--tile must be auto, staged, rows128, rows64, split, long-kv or partial"},
                                      {"--tile rows64 -d 128 --causal", "--tile rows64 ships for d = 64 and non-causal d = 128"},
                                      {"--tile partial -d 128", "--tile partial is a d = 64 tile"},
                                      {"--tile partial -d 64 --causal", "--tile partial is a non-causal tile"},
                                      {"--tile long-kv -d 64", "--tile long-kv is a d = 128 tile"},
                                      {"--tile long-kv -d 128 --causal", "--tile long-kv is a non-causal tile"},
                                      {"--tile rows128 -d 64,128", "--tile rows128 is a d = 64 tile"},
                                      {"--tile split -d 128 --causal", "--tile split is a non-causal tile"},
                                      {"--causal --causal-order lpt", "must be auto, head-major, longest-first, grouped or claimed"},
                                      {"--iters 5", "must be >= 20"},
                                      {"--dtype fp8", "bf16 or fp16"},
                                      {"--batch 0", "--batch must be >= 1"},
                                      {"--warmup-ms -1", "--warmup-ms must be in [0, 60000]"}});
}
#endif
