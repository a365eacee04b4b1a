// Launcher-mode environment parsing: torchrun and mpirun spellings, and one-line errors that
// say what to set.
#include <gtest/gtest.h>

#include <map>

#include "xstage/error.hpp"
#include "xstage/launch_env.hpp"

using namespace xstage;

namespace {
EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}
std::string error_of(std::map<std::string, std::string> m) {
  try {
    parse_launch_env(env_of(m));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(LaunchEnv, TorchrunStyle) {
  auto e = parse_launch_env(env_of(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.rendezvous_port, 29501);  // MASTER_PORT itself belongs to torchrun's store
}

TEST(LaunchEnv, MpirunStyleAndExplicitPort) {
  auto e = parse_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                    {"OMPI_COMM_WORLD_SIZE", "8"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                    {"MASTER_ADDR", "node0"},
                                    {"XSTAGE_RDZV_PORT", "4000"}}));
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.rendezvous_port, 4000);
  EXPECT_TRUE(launched_by_launcher(env_of({{"OMPI_COMM_WORLD_RANK", "0"}})));
  EXPECT_FALSE(launched_by_launcher(env_of({})));
}

TEST(LaunchEnv, SingleRankNeedsNoRendezvous) {
  auto e = parse_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
}

TEST(LaunchEnv, MisconfigurationsGiveOneLineErrors) {
  EXPECT_NE(error_of({}).find("RANK and WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("out of range"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2abc"}}).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
                .find("LOCAL_RANK"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_PORT", "1"}})
                .find("MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}})
                .find("MASTER_PORT"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"},
                      {"MASTER_PORT", "70000"}})
                .find("out of range"),
            std::string::npos);
  for (auto msg : {error_of({}), error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})})
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line: " << msg;
}
