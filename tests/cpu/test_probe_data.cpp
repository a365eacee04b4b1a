// Probe data JSON ("xstage.probe.v1"): round trip of every field and one clear error, with
// the file path, for each kind of bad file.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <unistd.h>

#include "xstage/error.hpp"
#include "xstage/probe_data.hpp"

using xstage::ProbePoint;
using xstage::ProbeRun;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("xstage_test_probe_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

ProbePoint full_point() {
  ProbePoint p;
  p.producers = 132;
  p.threads = 512;
  p.burst_bytes = 16384;
  p.gap_us = 10.5;
  p.gap_kind = "work";
  p.store = "v4_release";
  p.dest = "all_peers";
  p.addr = "rewrite";
  p.bursts = 64;
  p.warmup_bytes = 65536;
  p.pre_wait_us = 100;
  p.role = "validate";
  p.cold_issue_us = 1.25;
  p.steady_issue_us = 0.21;
  p.steady_issue_p10_us = 0.2;
  p.steady_issue_p90_us = 0.23;
  p.period_us = 10.71;
  p.gap_measured_us = 10.5;
  p.completion_us = 6.5;
  p.drain_gbps = 201.9;
  p.delivered_gbps = 187.5;
  p.aggregate_gbps = 190.25;
  p.producer_skew = 1.5;
  p.issue_us_per_burst = {1.25, 0.21, 0.22};
  return p;
}

ProbeRun full_run() {
  ProbeRun r;
  r.device = "2x NVIDIA H200";
  r.commit = "0123abcd";
  r.date = "2025-06-01T12:00:00Z";
  r.sm_count = 132;
  r.clock_ghz = 1.98;
  r.ce_peer_gbps = 394;
  r.points = {full_point(), full_point()};
  r.points[1].producers = 1;
  r.points[1].role = "fit";
  return r;
}

void expect_same(const ProbePoint& a, const ProbePoint& b) {
  EXPECT_EQ(a.producers, b.producers);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.burst_bytes, b.burst_bytes);
  EXPECT_EQ(a.gap_us, b.gap_us);
  EXPECT_EQ(a.gap_kind, b.gap_kind);
  EXPECT_EQ(a.store, b.store);
  EXPECT_EQ(a.dest, b.dest);
  EXPECT_EQ(a.addr, b.addr);
  EXPECT_EQ(a.bursts, b.bursts);
  EXPECT_EQ(a.warmup_bytes, b.warmup_bytes);
  EXPECT_EQ(a.pre_wait_us, b.pre_wait_us);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.cold_issue_us, b.cold_issue_us);
  EXPECT_EQ(a.steady_issue_us, b.steady_issue_us);
  EXPECT_EQ(a.steady_issue_p10_us, b.steady_issue_p10_us);
  EXPECT_EQ(a.steady_issue_p90_us, b.steady_issue_p90_us);
  EXPECT_EQ(a.period_us, b.period_us);
  EXPECT_EQ(a.gap_measured_us, b.gap_measured_us);
  EXPECT_EQ(a.completion_us, b.completion_us);
  EXPECT_EQ(a.drain_gbps, b.drain_gbps);
  EXPECT_EQ(a.delivered_gbps, b.delivered_gbps);
  EXPECT_EQ(a.aggregate_gbps, b.aggregate_gbps);
  EXPECT_EQ(a.producer_skew, b.producer_skew);
  EXPECT_EQ(a.issue_us_per_burst, b.issue_us_per_burst);
}

std::string load_error(const std::string& path) {
  try {
    xstage::load_probe_run(path);
  } catch (const xstage::Error& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST(ProbeData, JsonFieldNamesAreTheStructFieldNames) {
  const nlohmann::json j = full_point();
  for (const char* f : {"producers", "threads", "burst_bytes", "gap_us", "gap_kind", "store", "dest", "addr",
                        "bursts", "role", "cold_issue_us", "steady_issue_us", "steady_issue_p10_us",
                        "steady_issue_p90_us", "period_us", "gap_measured_us", "completion_us", "drain_gbps",
                        "delivered_gbps", "aggregate_gbps", "producer_skew", "warmup_bytes", "pre_wait_us",
                        "issue_us_per_burst"})
    EXPECT_TRUE(j.contains(f)) << f;
  EXPECT_EQ(j.size(), 24u);
  const nlohmann::json r = full_run();
  EXPECT_EQ(r.at("schema"), "xstage.probe.v1");
}

TEST(ProbeData, RoundTripThroughJsonAndFile) {
  const ProbeRun run = full_run();
  const ProbeRun back = nlohmann::json(run).get<ProbeRun>();
  EXPECT_EQ(back.device, run.device);
  EXPECT_EQ(back.commit, run.commit);
  EXPECT_EQ(back.date, run.date);
  EXPECT_EQ(back.sm_count, run.sm_count);
  EXPECT_EQ(back.clock_ghz, run.clock_ghz);
  EXPECT_EQ(back.ce_peer_gbps, run.ce_peer_gbps);
  ASSERT_EQ(back.points.size(), 2u);
  expect_same(back.points[0], run.points[0]);
  expect_same(back.points[1], run.points[1]);

  const auto path = temp_path("run.json");
  xstage::save_probe_run(run, path);
  const ProbeRun file = xstage::load_probe_run(path);
  ASSERT_EQ(file.points.size(), 2u);
  expect_same(file.points[0], run.points[0]);
  EXPECT_EQ(file.points[1].producers, 1);
  std::filesystem::remove(path);
}

TEST(ProbeData, OptionalFieldsDefault) {
  nlohmann::json j = full_run();
  for (const char* f : {"threads", "bursts", "steady_issue_p10_us", "steady_issue_p90_us", "gap_measured_us",
                        "completion_us", "drain_gbps", "delivered_gbps", "aggregate_gbps", "producer_skew",
                        "warmup_bytes", "pre_wait_us", "issue_us_per_burst"})
    j["points"][0].erase(f);
  j.erase("device");
  j.erase("sm_count");
  const ProbeRun r = j.get<ProbeRun>();
  EXPECT_EQ(r.points[0].threads, 0);
  EXPECT_EQ(r.points[0].bursts, 0);
  EXPECT_EQ(r.points[0].warmup_bytes, 0);
  EXPECT_EQ(r.points[0].pre_wait_us, 0.0);
  EXPECT_EQ(r.points[0].delivered_gbps, 0.0);
  EXPECT_EQ(r.points[0].producer_skew, 0.0);
  EXPECT_TRUE(r.points[0].issue_us_per_burst.empty());
  EXPECT_EQ(r.device, "");
  EXPECT_EQ(r.sm_count, 0);
}

TEST(ProbeData, IntegralFloatsAreAcceptedAsIntegers) {
  nlohmann::json j = full_run();
  j["points"][0]["burst_bytes"] = 16384.0;
  EXPECT_EQ(j.get<ProbeRun>().points[0].burst_bytes, 16384);
  j["points"][0]["burst_bytes"] = 16384.5;
  EXPECT_THROW(j.get<ProbeRun>(), xstage::Error);
}

TEST(ProbeData, EachBadFileGivesItsOwnMessageWithThePath) {
  const auto path = temp_path("bad.json");
  // Unreadable: missing file, a directory.
  EXPECT_TRUE(contains(load_error(path + ".nope"), path + ".nope: cannot open the probe data file"));
  const auto dir = std::filesystem::temp_directory_path().string();
  EXPECT_TRUE(contains(load_error(dir), dir + ": is a directory"));

  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = full_run();
    edit(j);
    std::ofstream(path) << j.dump();
    return load_error(path);
  };
  struct Case {
    std::string name, expect;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Case> cases = {
      {"wrong schema", "schema is \"xstage.params.v2\", expected \"xstage.probe.v1\"",
       [](nlohmann::json& j) { j["schema"] = "xstage.params.v2"; }},
      {"no schema", "missing field \"schema\"", [](nlohmann::json& j) { j.erase("schema"); }},
      {"not an object", "expected a JSON object, got array", [](nlohmann::json& j) { j = nlohmann::json::array(); }},
      {"no points", "missing field \"points\"", [](nlohmann::json& j) { j.erase("points"); }},
      {"points not array", "field \"points\": expected an array", [](nlohmann::json& j) { j["points"] = 3; }},
      {"missing producers", "points[1]: missing field \"producers\"",
       [](nlohmann::json& j) { j["points"][1].erase("producers"); }},
      {"missing measurement", "points[0]: missing field \"steady_issue_us\"",
       [](nlohmann::json& j) { j["points"][0].erase("steady_issue_us"); }},
      {"missing label", "points[0]: missing field \"dest\"", [](nlohmann::json& j) { j["points"][0].erase("dest"); }},
      {"wrong type", "points[0]: field \"burst_bytes\": expected an integer, got string",
       [](nlohmann::json& j) { j["points"][0]["burst_bytes"] = "16K"; }},
      {"producers < 1", "points[1]: producers must be >= 1, got 0",
       [](nlohmann::json& j) { j["points"][1]["producers"] = 0; }},
      {"burst_bytes <= 0", "burst_bytes must be > 0", [](nlohmann::json& j) { j["points"][0]["burst_bytes"] = 0; }},
      {"negative gap", "gap_us must be >= 0", [](nlohmann::json& j) { j["points"][0]["gap_us"] = -1.0; }},
      {"negative warm-up", "warmup_bytes must be >= 0", [](nlohmann::json& j) { j["points"][0]["warmup_bytes"] = -16; }},
      {"negative time", "period_us must be a finite value >= 0",
       [](nlohmann::json& j) { j["points"][0]["period_us"] = -0.5; }},
      {"bad role", "role must be \"fit\" or \"validate\", got \"train\"",
       [](nlohmann::json& j) { j["points"][0]["role"] = "train"; }},
      {"empty label", "store must not be empty", [](nlohmann::json& j) { j["points"][0]["store"] = ""; }},
      {"bad per-burst", "issue_us_per_burst[1] must be a finite value >= 0",
       [](nlohmann::json& j) { j["points"][0]["issue_us_per_burst"][1] = -2.0; }},
      {"overflowing int", "field \"producers\": integer 5000000000 is out of range",
       [](nlohmann::json& j) { j["points"][0]["producers"] = 5000000000LL; }},
  };
  for (const auto& c : cases) {
    const std::string e = with(c.edit);
    EXPECT_TRUE(contains(e, path + ": ")) << c.name << ": " << e;
    EXPECT_TRUE(contains(e, c.expect)) << c.name << ": expected \"" << c.expect << "\" in: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << c.name;
  }

  std::ofstream(path) << "{\"schema\": \"xstage.probe.v1\", \"points\": [";
  const std::string e = load_error(path);
  EXPECT_TRUE(contains(e, path + ": not valid JSON")) << e;
  std::filesystem::remove(path);
}

TEST(ProbeData, SaveToAnUnwritablePathFails) {
  EXPECT_THROW(xstage::save_probe_run(full_run(), "/nonexistent-dir/x/run.json"), xstage::Error);
}

// The committed 2xH200 run (the model's calibration data) loads and holds what the fitter and
// docs/model.md rely on: zero-gap and large-gap sweeps, held-out points, the cold-burst study.
TEST(ProbeData, CommittedH200RunLoads) {
  const std::string path = std::string(XSTAGE_SOURCE_DIR) + "/results/probe-h200x2/probe.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const ProbeRun run = xstage::load_probe_run(path);
  EXPECT_EQ(run.sm_count, 132);
  int zero = 0, isolated = 0, held_out = 0, warm_up = 0;
  for (const auto& p : run.points) {
    zero += p.gap_us == 0 && p.bursts >= 64 && p.aggregate_gbps > 0 && p.gap_measured_us > 0;
    isolated += p.gap_us >= 10 && p.role == "fit";
    held_out += p.role == "validate";
    warm_up += p.warmup_bytes > 0;
    EXPECT_EQ(p.issue_us_per_burst.size(), static_cast<size_t>(p.bursts));
  }
  EXPECT_GT(zero, 20);
  EXPECT_GT(isolated, 30);
  EXPECT_GT(held_out, 20);
  EXPECT_GT(warm_up, 5);
}
