#include "xstage/launch_env.hpp"

#include <cstdlib>
#include <string>

#include "xstage/error.hpp"

namespace xstage {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

namespace {

std::optional<std::string> first_of(const EnvLookup& env, const char* a, const char* b) {
  if (auto v = env(a)) return v;
  return env(b);
}

int parse_int(const std::string& name, const std::string& text, int lo, int hi) {
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw InvalidArgument("launcher environment: " + name + "='" + text +
                          "' is not an integer; set it to a whole number");
  if (v < lo || v > hi)
    throw InvalidArgument("launcher environment: " + name + "=" + text + " is out of range [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(v);
}

}  // namespace

bool launched_by_launcher(const EnvLookup& env) {
  return env("RANK").has_value() || env("OMPI_COMM_WORLD_RANK").has_value();
}

LaunchEnv parse_launch_env(const EnvLookup& env) {
  LaunchEnv out;
  auto rank = first_of(env, "RANK", "OMPI_COMM_WORLD_RANK");
  auto world = first_of(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
  if (!rank || !world)
    throw InvalidArgument(
        "launcher environment: RANK and WORLD_SIZE must both be set (start with torchrun "
        "--no-python, mpirun, or scripts/launch-local N CMD)");
  out.world_size = parse_int("WORLD_SIZE", *world, 1, 1 << 20);
  out.rank = parse_int("RANK", *rank, 0, out.world_size - 1);
  if (auto lr = first_of(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"))
    out.local_rank = parse_int("LOCAL_RANK", *lr, 0, out.world_size - 1);
  else if (out.world_size == 1)
    out.local_rank = 0;
  else
    throw InvalidArgument("launcher environment: LOCAL_RANK is not set (it picks this process's GPU)");
  if (auto addr = env("MASTER_ADDR")) {
    if (addr->empty()) throw InvalidArgument("launcher environment: MASTER_ADDR is empty");
    out.master_addr = *addr;
  } else if (out.world_size > 1) {
    throw InvalidArgument("launcher environment: MASTER_ADDR is not set (address of rank 0's host)");
  }
  if (auto p = env("XSTAGE_RDZV_PORT")) {
    out.rendezvous_port = parse_int("XSTAGE_RDZV_PORT", *p, 1, 65535);
  } else if (auto mp = env("MASTER_PORT")) {
    out.rendezvous_port = parse_int("MASTER_PORT", *mp, 1, 65534) + 1;
  } else if (out.world_size > 1) {
    throw InvalidArgument("launcher environment: set MASTER_PORT or XSTAGE_RDZV_PORT (rendezvous port)");
  }
  return out;
}

}  // namespace xstage
