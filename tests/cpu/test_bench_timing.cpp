// The benches' shared timing statistics and result-file finish (src/cli/bench_timing.hpp,
// src/cli/bench_util.hpp): the quantiles and rates of a known sample, the record's keys, the
// rotating inputs' size, and a failed cell that writes the file and then fails the command with
// its one-line message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/bench_timing.hpp"

namespace xc = xstage::cli;

TEST(BenchTiming, StatsOfAKnownSample) {
  // 11 launches of 10, 11, ..., 20 µs in scrambled order: median 15, p10 11, p90 19.
  const std::vector<double> us = {15, 12, 20, 10, 18, 11, 13, 19, 14, 17, 16};
  const double flops = 3e9;
  const xc::TimingStats t = xc::TimingStats::of(us, flops);
  EXPECT_DOUBLE_EQ(t.median_us, 15.0);
  EXPECT_DOUBLE_EQ(t.min_us, 10.0);
  EXPECT_DOUBLE_EQ(t.max_us, 20.0);
  EXPECT_DOUBLE_EQ(t.p10_us, 11.0);
  EXPECT_DOUBLE_EQ(t.p90_us, 19.0);
  EXPECT_DOUBLE_EQ(t.tflops, flops / 15e-6 / 1e12);       // 200 TFLOP/s at the median
  EXPECT_DOUBLE_EQ(t.tflops_best, flops / 10e-6 / 1e12);  // 300 at the best time
}

TEST(BenchTiming, PutWritesTheSevenSharedKeys) {
  nlohmann::json j = {{"backend", "xstage"}};
  xc::TimingStats::of({2.0, 4.0}, 1e6).put(j);
  for (const char* k : {"median_us", "min_us", "max_us", "p10_us", "p90_us", "tflops", "tflops_best"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_DOUBLE_EQ(j["median_us"].get<double>(), 3.0);
  EXPECT_EQ(j["backend"], "xstage");
}

TEST(BenchTiming, FinishWritesTheFileThenFailsAFailedCell) {
  const std::string path = (std::filesystem::temp_directory_path() / "xstage_bench_timing_test.json").string();
  std::filesystem::remove(path);
  nlohmann::json j = {{"schema", "test"}};
  nlohmann::json rs = nlohmann::json::array({{{"check", "FAIL"}}, {{"check", "ok"}}});
  try {
    xc::finish_bench(j, rs, 1, 2, path, "attention");
    FAIL() << "a failed cell must fail the command";
  } catch (const xstage::Error& e) {
    EXPECT_EQ(std::string(e.what()), "bench attention: 1 of 2 cells FAILED their output check (exit 1)");
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "the result file is written before the failure";
  const nlohmann::json back = nlohmann::json::parse(in);
  EXPECT_EQ(back["cells_failed"], 1);
  EXPECT_EQ(back["results"].size(), 2u);
  std::filesystem::remove(path);
}

TEST(BenchTiming, FinishNamesPointsAndPassesWithoutAFile) {
  nlohmann::json j;
  EXPECT_NO_THROW(xc::finish_bench(j, nlohmann::json::array(), 0, 3, "", "ulysses", "points"));
  EXPECT_TRUE(j.is_null()) << "no --json: nothing is assembled";
  try {
    xc::finish_bench(j, nlohmann::json::array(), 2, 3, "", "ulysses", "points");
    FAIL() << "failed points must fail the command";
  } catch (const xstage::Error& e) {
    EXPECT_EQ(std::string(e.what()), "bench ulysses: 2 of 3 points FAILED their output check (exit 1)");
  }
}

TEST(BenchTiming, RotatingInputsCoverTwiceTheL2UnlessAsked) {
  cudaDeviceProp prop{};
  prop.l2CacheSize = 60 << 20;  // the H200's 60 MiB
  EXPECT_EQ(xc::rotate_bytes_for(0, prop), size_t(120) << 20);
  EXPECT_EQ(xc::rotate_bytes_for(256, prop), size_t(256) << 20);
  EXPECT_EQ(xc::rotate_bytes_for(0.5, prop), size_t(512) << 10);
}

TEST(BenchTiming, AnUnwritableResultFileIsAOneLineError) {
  nlohmann::json j = {{"schema", "test"}};
  const std::string path = "/nonexistent-xstage-dir/r.json";
  try {
    xc::finish_bench(j, nlohmann::json::array(), 0, 1, path, "attention");
    FAIL() << "writing into a missing folder must fail";
  } catch (const xstage::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot open the JSON file for writing");
  }
}
