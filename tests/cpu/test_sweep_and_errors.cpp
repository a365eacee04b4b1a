// Probe sweep definitions (flags and bench/ files) and the error helpers: every bad value is
// refused with a message naming it, before any GPU is touched.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "xstage/device_status.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/probe_sweep.hpp"

using namespace xstage;

TEST(Errors, FormatAndDeviceStatusStory) {
  EXPECT_EQ(format_error("allocating 4096 bytes", "out of memory"), "allocating 4096 bytes: out of memory");
  EXPECT_EQ(format_error("", "x"), "x");
  DeviceStatus ok{};
  EXPECT_EQ(describe_device_status(ok), "");
  DeviceStatus s{};
  s.code = 1;
  s.wait_id = static_cast<uint32_t>(WaitId::barrier);
  s.rank = 1;
  s.block = 3;
  s.waited_ns = 2'500'000'000ull;
  s.expected = 7;
  s.observed = 6;
  std::string m = describe_device_status(s);
  EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("cross-rank barrier"), std::string::npos) << m;
  EXPECT_NE(m.find("2.500 s"), std::string::npos) << m;
  EXPECT_NE(m.find(">= 7"), std::string::npos) << m;
  // A kernel's bad-input report (code 2) says what was wrong, not that a wait timed out.
  DeviceStatus b{};
  b.code = 2;
  b.wait_id = static_cast<uint32_t>(WaitId::moe_bad_expert);
  b.rank = 0;
  b.expected = 8;
  b.observed = 9;
  const std::string mb = describe_device_status(b);
  EXPECT_NE(mb.find("outside [0, experts)"), std::string::npos) << mb;
  EXPECT_NE(mb.find("limit 8, got 9"), std::string::npos) << mb;
  EXPECT_EQ(mb.find("timed out"), std::string::npos) << mb;
}

TEST(Sweep, ParseBytes) {
  EXPECT_EQ(ops::parse_bytes("4096"), 4096);
  EXPECT_EQ(ops::parse_bytes("16KiB"), 16384);
  EXPECT_EQ(ops::parse_bytes("16k"), 16384);
  EXPECT_EQ(ops::parse_bytes("2MiB"), 2 << 20);
  EXPECT_THROW(ops::parse_bytes("abc"), InvalidArgument);
  EXPECT_THROW(ops::parse_bytes("12GiB"), InvalidArgument);
}

TEST(Sweep, CartesianProductAndAllSms) {
  ops::SweepAxes a;
  a.producers = {0, 8};
  a.burst_bytes = {4096, 16384};
  a.gap_us = {0, 1, 2};
  a.store = {"v4", "bulk"};
  auto pts = ops::expand_sweep(a, 132);
  ASSERT_EQ(pts.size(), 2u * 2 * 3 * 2);
  EXPECT_EQ(pts.front().producers, 132);
  int k8 = 0;
  for (const auto& p : pts) k8 += p.producers == 8;
  EXPECT_EQ(k8, 12);
}

TEST(Sweep, BadAxesAreRefused) {
  auto bad = [](auto mutate) {
    ops::SweepAxes a;
    mutate(a);
    EXPECT_THROW(ops::expand_sweep(a, 132), InvalidArgument);
  };
  bad([](ops::SweepAxes& a) { a.burst_bytes = {24}; });
  bad([](ops::SweepAxes& a) { a.burst_bytes = {0}; });
  bad([](ops::SweepAxes& a) { a.gap_us = {-1}; });
  bad([](ops::SweepAxes& a) { a.producers = {-2}; });
  bad([](ops::SweepAxes& a) { a.store = {"st.cs"}; });
  bad([](ops::SweepAxes& a) { a.dest = {"moon"}; });
  bad([](ops::SweepAxes& a) { a.bursts = 1; });
  bad([](ops::SweepAxes& a) { a.gap_us = {}; });
  bad([](ops::SweepAxes& a) { a.role = "train"; });
}

TEST(Sweep, FilesAreReadAndErrorsNameTheGroup) {
  const std::string good = ::testing::TempDir() + "/sweep_good.json";
  std::ofstream(good) << R"({"groups":[{"name":"zero gap","producers":[132,66],"burst_bytes":["16KiB",32768],
    "gap_us":[0]},{"role":"validate","gap_us":[1,2],"store":["bulk"]}]})";
  auto g = ops::load_sweep_file(good);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].burst_bytes, (std::vector<long long>{16384, 32768}));
  EXPECT_EQ(g[1].role, "validate");
  // The shipped sweep parses.
  EXPECT_NO_THROW(ops::load_sweep_file(std::string(XSTAGE_SOURCE_DIR) + "/bench/probe-h200.json"));

  const std::string bad = ::testing::TempDir() + "/sweep_bad.json";
  std::ofstream(bad) << R"({"groups":[{"gap_us":[0]},{"burst_bytes":[24]}]})";
  try {
    ops::load_sweep_file(bad);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("group 1"), std::string::npos) << e.what();
  }
  std::ofstream(bad) << R"({"groups":[{"gap_usec":[0]}]})";
  EXPECT_THROW(ops::load_sweep_file(bad), InvalidArgument);
  std::ofstream(bad) << "not json";
  EXPECT_THROW(ops::load_sweep_file(bad), InvalidArgument);
  EXPECT_THROW(ops::load_sweep_file("/nonexistent/sweep.json"), InvalidArgument);
}
