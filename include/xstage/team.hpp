// A team of ranks, one GPU each, joined by an NCCL communicator with symmetric memory.
// Two launch modes, one API:
//   Team::local(opts)          one process drives every local GPU (run() gives a thread per GPU)
//   Team::from_launcher(opts)  one process per GPU (torchrun / mpirun / scripts/launch-local)
// In both, "local index" i runs over the ranks this process drives (all of them, or just one).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "xstage/device_status.hpp"
#include "xstage/launch_env.hpp"

namespace xstage {

// What a kernel needs to reach its team: passed by value as a kernel argument.
struct TeamDevice {
  int rank = 0;
  int world = 1;
  ncclWindow_t ctrl = nullptr;      // control window: barrier slots and flags (symmetric)
  DeviceStatus* status = nullptr;   // where a timed-out wait reports (device memory)
  uint64_t timeout_ns = 0;          // bound on every device-side wait
};

// Byte layout of the control window (same on every rank).
struct CtrlLayout {
  static constexpr size_t kBarrierSlots = 0;       // uint64_t[world]: last epoch each peer reached
  static constexpr size_t kUserFlags = 64 * 1024;  // free for operators (flags, counters)
  static constexpr size_t kBytes = 1 << 20;
};

// A buffer allocated with ncclMemAlloc on every rank and registered as a symmetric window.
struct SymmetricBuffer {
  size_t bytes = 0;
  std::vector<void*> local;          // per local index: this rank's copy
  std::vector<ncclWindow_t> window;  // per local index: window handle (valid in kernels)
};

struct TeamOptions {
  int gpus = 0;                 // local mode: how many GPUs (0 = all visible)
  int min_gpus = 1;             // fewer ranks than this is an error (checked at creation)
  double wait_timeout_s = 5.0;  // device-side wait bound
};

class Team {
 public:
  static std::unique_ptr<Team> local(const TeamOptions& opts);
  static std::unique_ptr<Team> from_launcher(const TeamOptions& opts, const LaunchEnv& env);
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  int world_size() const;
  int local_count() const;
  int rank(int i) const;
  int device(int i) const;
  cudaStream_t stream(int i) const;
  ncclComm_t comm(int i) const;
  TeamDevice device_view(int i) const;
  // The control window (barrier slots at CtrlLayout::kBarrierSlots, flags from kUserFlags).
  const SymmetricBuffer& ctrl() const;
  // Barrier epochs: every rank calls this once per barrier it launches, in the same order.
  uint64_t next_epoch(int i);
  // Reserves `bytes` (rounded up to 64) of the control window's user area for an operator
  // (flags, counters; zero until used) and returns its byte offset. Every process reserves
  // in the same order, so offsets agree across ranks. Throws Error when the area is full.
  size_t reserve_ctrl(size_t bytes);

  // Collective: every rank of the team must call it (local mode: once for all local ranks).
  SymmetricBuffer& alloc_symmetric(size_t bytes);
  // Collective, after all work on the buffer is done; the reference dies with it.
  void free_symmetric(SymmetricBuffer& buf);

  // Runs fn(i) for every local index, a thread each with its GPU current; joins; rethrows
  // the first failure (prefixed with the rank).
  void run(const std::function<void(int)>& fn);

  // Reads and clears rank i's device status; throws Error with the timed-out wait's story.
  void check_device_status(int i);

  struct Impl;

 private:
  explicit Team(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage
