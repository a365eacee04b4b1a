// python/w4a8_trace.py summarises the W4A8 stage trace (src/kernels/moe/w4a8_trace.cuh): on a
// synthetic trace with known intervals (clock values wrapping past 2^32 in the middle) every
// median it prints must be the interval that was written, and unreached slots must be ignored;
// the same for the register-operand kernels' slots (two pieces and one).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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

// Register-operand slots (W4RsTraceSlot), period 2500 per K block: producer issue of block s at
// t - 6000; consumer group w at t + 20 w + offsets: two pieces {0, 300, 450, 470, 770, 920,
// 1000, 1100} (issue0, complete0, promoted0, issue1, complete1, released, next full, next
// converted), one piece {0, 100, 200, 600, 800}.
// w1_shift: group 1's stamps sit that many cycles after group 0's.
void write_rs_trace(const fs::path& p, int pieces, uint32_t w1_shift = 20) {
  std::ofstream f(p);
  f << "# w4a8 trace: register-operand pieces " << pieces << " block_t 256 gate_up 0 lut 1 mxfp4 0\n";
  const std::vector<uint32_t> two{0, 300, 450, 470, 770, 920, 1000, 1100}, one{0, 100, 200, 600, 800};
  const std::vector<uint32_t>& offs = pieces == 2 ? two : one;
  for (int c = 0; c < 2; ++c)
    for (int s = 0; s < 64; ++s) {
      const uint32_t t = 0xFFFF8000u + static_cast<uint32_t>(c * 5 + s * 2500);
      f << c << " " << s << " " << (t - 6000) << " " << 0xFFFFFFFFu << " " << 0xFFFFFFFFu << " " << 0xFFFFFFFFu;
      for (int w = 0; w < 2; ++w)
        for (size_t i = 0; i < 8; ++i) f << " " << (i < offs.size() ? t + w1_shift * w + offs[i] : 0xFFFFFFFFu);
      f << "\n";
    }
}

std::map<std::string, double> medians(const fs::path& trace, const fs::path& out) {
  const std::string cmd = "python3 '" + std::string(XSTAGE_SOURCE_DIR) + "/python/w4a8_trace.py' '" + trace.string() +
                          "' >'" + out.string() + "' 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(out);
  std::map<std::string, double> med;
  std::istringstream lines(slurp(out));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    std::string name;
    double n = 0, m = 0;
    if (ls >> name >> n >> m) med[name] = m;
  }
  return med;
}

}  // namespace

TEST(W4A8TraceTool, RegisterOperandSlots) {
  if (std::system("python3 -c 'import statistics' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_w4rstrace_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path trace = dir / "trace.txt", out = dir / "out.txt";
  write_rs_trace(trace, 2);
  auto med = medians(trace, out);
  // lead: next block's full seen (t + 1000 + 20 w) - its producer issue (t + 2500 - 6000).
  const std::map<std::string, double> two = {
      {"mma0[0]", 300},  {"promote0[0]", 150}, {"issue1[0]", 20},     {"mma1[1]", 300},   {"promote1[0]", 150},
      {"full_wait[0]", 80}, {"convert[1]", 100}, {"gap[0]", 1400},    {"period[1]", 2500}, {"lead[0]", 4500},
      {"lead[1]", 4520},
  };
  for (const auto& [k, v] : two) {
    ASSERT_TRUE(med.count(k)) << "missing " << k << " in\n" << slurp(out);
    EXPECT_DOUBLE_EQ(med[k], v) << k;
  }
  write_rs_trace(trace, 1);
  med = medians(trace, out);
  const std::map<std::string, double> one = {
      {"full_wait[0]", 100}, {"convert[0]", 100}, {"mma_rest[1]", 400}, {"promote[0]", 200},
      {"gap[0]", 1700},      {"period[0]", 2500}, {"lead[0]", 3600},
  };
  for (const auto& [k, v] : one) {
    ASSERT_TRUE(med.count(k)) << "missing " << k << " in\n" << slurp(out);
    EXPECT_DOUBLE_EQ(med[k], v) << k;
  }
  EXPECT_EQ(med.count("mma0[0]"), 0u) << "one piece has no piece-0 interval";
  EXPECT_EQ(med.count("issue_wait_other[0]"), 0u) << "no piece issue ends within 64 cycles of the other group's wgmmas";
  fs::remove_all(dir);
}

// Group 1 160 cycles behind: its piece 0 completes (t + 460) 10 cycles before group 0's piece 1
// issue ends (t + 470), in every K block; nothing else lines up within 64 cycles. The timeline
// of K block 13 (its clock values wrap past 2^32) lists that issue at cycle 470, 10 after.
TEST(W4A8TraceTool, IssueAfterTheOtherGroupAndTimeline) {
  if (std::system("python3 -c 'import statistics' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_w4rstl_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path trace = dir / "trace.txt", out = dir / "out.txt";
  write_rs_trace(trace, 2, 160);
  auto med = medians(trace, out);
  ASSERT_TRUE(med.count("issue_wait_other[0]")) << slurp(out);
  EXPECT_DOUBLE_EQ(med["issue_wait_other[0]"], 10);
  EXPECT_EQ(med.count("issue_wait_other[1]"), 0u) << slurp(out);
  const std::string cmd = "python3 '" + std::string(XSTAGE_SOURCE_DIR) + "/python/w4a8_trace.py' '" + trace.string() +
                          "' --timeline 0:13:13 >'" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(out);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("    470     +10  WG0 kb13 issued1"), std::string::npos) << text;
  EXPECT_LT(text.find("WG0 kb13 issued0"), text.find("WG1 kb13 issued0")) << text;
  EXPECT_LT(text.find("WG1 kb13 next_converted"), std::string::npos) << text;
  // A one-piece trace has other slots: --timeline refuses it with a message.
  write_rs_trace(trace, 1);
  EXPECT_NE(std::system(cmd.c_str()), 0) << slurp(out);
  EXPECT_NE(slurp(out).find("two pieces"), std::string::npos) << slurp(out);
  fs::remove_all(dir);
}

TEST(W4A8TraceTool, MediansAreTheWrittenIntervals) {
  if (std::system("python3 -c 'import statistics' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_w4trace_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path trace = dir / "trace.txt", out = dir / "out.txt";
  write_trace(trace, 3, 40, 2);
  std::map<std::string, double> med = medians(trace, out);  // quantity -> median column
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
