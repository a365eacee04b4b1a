// Launcher mode: one process per GPU, started by torchrun / mpirun / scripts/launch-local.
// The environment says which rank this process is and where rank 0 publishes the NCCL
// unique id.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace xstage {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int rendezvous_port = 0;     // TCP port rank 0 listens on for the NCCL unique id
};

// Looks a variable up; the default reads the process environment. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// True when the environment names a launcher rank (RANK or OMPI_COMM_WORLD_RANK set).
bool launched_by_launcher(const EnvLookup& env = process_env());

// Parses RANK, WORLD_SIZE, LOCAL_RANK (torchrun style) or OMPI_COMM_WORLD_{RANK,SIZE,
// LOCAL_RANK} (mpirun), MASTER_ADDR, and the rendezvous port: XSTAGE_RDZV_PORT, else
// MASTER_PORT + 1 (torchrun's own store already listens on MASTER_PORT).
// Throws InvalidArgument with a one-line message saying what to set.
LaunchEnv parse_launch_env(const EnvLookup& env = process_env());

}  // namespace xstage
