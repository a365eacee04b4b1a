// Launcher mode (one process per GPU): started by scripts/launch-local or torchrun
// --no-python. Joins the team from RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT,
// exchanges a pattern with every peer through symmetric windows, and checks it.
// Exit codes: 0 pass, 1 fail, 77 skipped (not enough GPUs / not launched).
#include <cuda_runtime.h>

#include <cstdio>

#include "xstage/error.hpp"
#include "xstage/launch_env.hpp"
#include "xstage/ops/selftest.hpp"
#include "xstage/team.hpp"

int main() {
  using namespace xstage;
  if (!launched_by_launcher()) {
    std::printf("SKIP: not started by a launcher (RANK unset); run via scripts/launch-local N\n");
    return 77;
  }
  try {
    LaunchEnv env = parse_launch_env();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < env.world_size) {
      std::printf("SKIP: rank %d: needs %d GPUs, found %d\n", env.rank, env.world_size, n);
      return 77;
    }
    TeamOptions o;
    o.min_gpus = 2;
    auto team = Team::from_launcher(o, env);
    auto rep = ops::exchange_selftest(*team, (1 << 20) + 32, 1234);
    unsigned long long bad = 0;
    for (auto w : rep.at(0).wrong_words) bad += w;
    std::printf("rank %d of %d (GPU %d): launcher-mode exchange %s (%llu wrong words)\n", env.rank, env.world_size,
                team->device(0), bad ? "FAILED" : "ok", bad);
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launcher test: %s\n", e.what());
    return 1;
  }
}
