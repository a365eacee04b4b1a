// python/w4a8_trace.py summarises the W4A8 stage trace (src/kernels/moe/w4a8_trace.cuh): on a
// synthetic trace with known intervals (clock values wrapping past 2^32 in the middle) every
// median it prints must be the interval that was written, and unreached slots must be ignored.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Per stage (period 3000 cycles): producer issue at t - 5000, converter full at t - 900,
// cempty at t - 800, cfull arrived at t - 200; consumer group w ready at t + 10 w, committed
// +400, own conversion +1400, wgmmas complete +1600, released +2300 (so gap = 700 + 0).
void write_trace(const fs::path& p, int ctas, int stages, int wgs) {
  std::ofstream f(p);
  f << "# w4a8 trace: synthetic\n";
  for (int c = 0; c < ctas; ++c)
    for (int s = 0; s < 64; ++s) {
      f << c << " " << s;
      const uint32_t t = 0xFFFF0000u + static_cast<uint32_t>(c * 7 + s * 3000);  // wraps at s ~ 22
      const bool live = s < stages;
      auto put = [&](uint32_t v) { f << " " << (live ? v : 0xFFFFFFFFu); };
      put(t - 5000);
      put(t - 900);
      put(t - 800);
      put(t - 200);
      for (int w = 0; w < 3; ++w) {
        const uint32_t r = t + 10 * w;
        const bool used = w < wgs;
        for (uint32_t d : {0u, 400u, 1400u, 1600u, 2300u}) f << " " << (live && used ? r + d : 0xFFFFFFFFu);
      }
      f << "\n";
    }
}

}  // namespace

TEST(W4A8TraceTool, MediansAreTheWrittenIntervals) {
  if (std::system("python3 -c 'import statistics' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_w4trace_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path trace = dir / "trace.txt", out = dir / "out.txt";
  write_trace(trace, 3, 40, 2);
  const std::string cmd = "python3 '" + std::string(XSTAGE_SOURCE_DIR) + "/python/w4a8_trace.py' '" + trace.string() +
                          "' >'" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(out);
  // quantity -> median column.
  std::map<std::string, double> med;
  std::istringstream lines(slurp(out));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    std::string name;
    double n = 0, m = 0;
    if (ls >> name >> n >> m) med[name] = m;
  }
  const std::map<std::string, double> want = {
      {"tma", 4100},        {"conv", 600},          {"issue[0]", 400},      {"own_conv[0]", 1000},
      {"wgmma_rest[0]", 200}, {"promote[0]", 700},  {"gap[0]", 700},        {"period[0]", 3000},
      {"period[1]", 3000},  {"issue[1]", 400},      {"cfull_wait[0]", 200},
      {"conv_wait_full", 2300}, {"conv_wait_empty", 100},
  };
  for (const auto& [k, v] : want) {
    ASSERT_TRUE(med.count(k)) << "missing " << k << " in\n" << slurp(out);
    EXPECT_DOUBLE_EQ(med[k], v) << k;
  }
  EXPECT_EQ(med.count("period[2]"), 0u) << "warp group 2 never ran";
  fs::remove_all(dir);
}
