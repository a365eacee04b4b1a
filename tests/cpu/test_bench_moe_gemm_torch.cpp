// python/bench_moe_gemm_torch.py, the cuBLASLt baseline of `xstage bench moe-gemm`: bad flags
// (among them the sustained-clock warm-up, --warmup-ms) are refused with exit status 2 and a
// message before PyTorch or a GPU is touched; valid flags on a machine without PyTorch or
// without a GPU end with exit status 3 and say why, never with a traceback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "python_tool_util.hpp"

namespace {

namespace fs = std::filesystem;
using xstage::test::quote;
using xstage::test::slurp;

int run_tool(const std::string& args, const fs::path& out) {
  return xstage::test::run_python_tool("bench_moe_gemm_torch.py", args, out);
}

}  // namespace

TEST(BenchMoeGemmTorch, RefusesBadFlagsBeforeTouchingTorch) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path out = fs::temp_directory_path() / ("xs_bmgt_" + std::to_string(::getpid()) + ".txt");
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"--warmup-ms -1", "--warmup-ms in [0, 60000]"},
                        Case{"--warmup-ms 70000", "--warmup-ms in [0, 60000]"},
                        Case{"--iters 5", "--iters must be >= 20"},
                        Case{"--warmup -2", "--warmup >= 0"},
                        Case{"--tokens 0", "--tokens needs values >= 1"},
                        Case{"--models GPT", "--models matched none"},
                        Case{"--no-dense", "--no-dense needs --grouped-json"}}) {
    EXPECT_EQ(run_tool(c.args, out), 2) << c.args << ": " << slurp(out);
    EXPECT_NE(slurp(out).find(c.says), std::string::npos) << c.args << ": " << slurp(out);
  }
  // Valid flags: either it runs (a GPU with PyTorch: not this test's business, so only a
  // tiny problem) or it stops with status 3 and a reason.
  const int st = run_tool("--models DiT-MoE-G --tokens 16 --iters 20 --warmup 0 --warmup-ms 0", out);
  const std::string text = slurp(out);
  if (st == 3) {
    EXPECT_TRUE(text.find("PyTorch not available") != std::string::npos ||
                text.find("no CUDA device") != std::string::npos)
        << text;
  } else {
    EXPECT_EQ(st, 0) << text;
  }
  EXPECT_EQ(text.find("Traceback"), std::string::npos) << text;
  fs::remove(out);
}
