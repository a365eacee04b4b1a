// A team of ranks joined by symmetric memory. Three ways to make one, one API:
//   Team::local(opts)             one process drives every local GPU (run() gives a thread per GPU)
//   Team::from_launcher(opts)     one process per GPU (torchrun / mpirun / scripts/launch-local)
//   Team::from_unique_id(...)     one process per GPU, the NCCL id handed over by the caller
//                                 (e.g. broadcast through a torch.distributed process group)
//   Team::virtual_ranks(P, opts)  P ranks on one GPU, each on its own partition of the SMs
//                                 (docs/virtual-ranks.md); no NCCL communicator
// In all, "local index" i runs over the ranks this process drives (all of them, or just one).
// Kernels see a team only through TeamDevice and PeerWindow, which are the same for real
// and virtual ranks: a virtual team's "remote" stores are HBM-local stores into another
// rank's allocation on the same GPU.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xstage/device_status.hpp"
#include "xstage/launch_env.hpp"

namespace xstage {

// Ranks of one team at most (one NVLink node); PeerWindow holds a pointer per rank.
inline constexpr int kMaxTeamSize = 8;

// Every rank's copy of a symmetric buffer, as addressable from one rank's GPU: what kernels
// take instead of an NCCL window handle, by value (no lookup on the store path).
struct PeerWindow {
  char* base[kMaxTeamSize] = {};
#if defined(__CUDACC__)
  __host__ __device__
#endif
  void* at(int peer, size_t offset) const { return base[peer] + offset; }
};

// What a kernel needs to reach its team: passed by value as a kernel argument.
struct TeamDevice {
  int rank = 0;
  int world = 1;
  PeerWindow ctrl;                  // control window: barrier slots and flags (symmetric)
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
// In a virtual team it is a plain allocation per rank on the one GPU.
struct SymmetricBuffer {
  size_t bytes = 0;
  std::vector<void*> local;          // per local index: this rank's copy
  std::vector<PeerWindow> peers;     // per local index: every rank's copy, as seen from it
  std::vector<ncclWindow_t> window;  // per local index: NCCL window handle (null if virtual)
};

struct TeamOptions {
  int gpus = 0;                 // local mode: how many GPUs (0 = all visible)
  int min_gpus = 1;             // fewer ranks than this is an error (checked at creation)
  double wait_timeout_s = 5.0;  // device-side wait bound
  int virtual_device = 0;       // virtual_ranks: the GPU the ranks share
  // virtual_ranks: how the SMs are split. auto_ = green contexts where the driver has them,
  // else reduced grids on plain streams; each can be forced (tests, comparisons).
  enum class SmPartition { auto_, green_contexts, reduced_grids } partition = SmPartition::auto_;
};

class Team {
 public:
  static std::unique_ptr<Team> local(const TeamOptions& opts);
  static std::unique_ptr<Team> from_launcher(const TeamOptions& opts, const LaunchEnv& env);
  // One process per GPU with the NCCL unique id (new_unique_id() on one rank) delivered by the
  // caller: every rank calls it with the same id, its rank, the world size and its GPU.
  static std::unique_ptr<Team> from_unique_id(const TeamOptions& opts, int rank, int world, int device,
                                              const std::vector<char>& id);
  static std::vector<char> new_unique_id();
  // P ranks in this process on GPU opts.virtual_device, each with its own SM partition,
  // stream and symmetric allocations. Throws InvalidArgument when P is outside 1..8 or the
  // SMs cannot be split into P partitions (xstage/virtual_ranks.hpp says how they are split).
  static std::unique_ptr<Team> virtual_ranks(int P, const TeamOptions& opts);
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  int world_size() const;
  int local_count() const;
  int rank(int i) const;
  int device(int i) const;
  cudaStream_t stream(int i) const;
  // The NCCL communicator of local rank i; throws InvalidArgument for a virtual team.
  ncclComm_t comm(int i) const;
  // True when the ranks are SM partitions of one GPU.
  bool is_virtual() const;
  // "gpus" or "virtual": how the team's figures must be labelled.
  const char* kind() const;
  // SMs local rank i's kernels may use (the whole GPU for a real rank, its partition for a
  // virtual one): every persistent grid is sized from this.
  int sm_count(int i) const;
  // How the SMs are split ("" for a real team), e.g. "green contexts, 4 x 32 SMs (4 unused)".
  std::string partition_story() const;
  // A further stream for local rank i's work, inside its SM partition when it has one; the
  // caller destroys it (cudaStreamDestroy).
  cudaStream_t create_stream(int i);
  // Waits for local rank i's stream, bounded (polling, never a bare cudaStreamSynchronize: a
  // kernel that never starts would hang it); throws Error saying `what` on a timeout or error.
  void synchronize(int i, const std::string& what) const;
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

  // Collective All-to-All of `bytes_per_peer` bytes from rank i's `send` ([world][bytes]) into
  // its `recv` ([world][bytes]), on `s`: ncclAlltoAll on a real team, copies between the
  // ranks' buffers on a virtual one (all local ranks must call it, from run()).
  void all_to_all(int i, const void* send, void* recv, size_t bytes_per_peer, cudaStream_t s);

  // Runs fn(i) for every local index, a thread each with its GPU current; joins; rethrows
  // the first failure (prefixed with the rank).
  void run(const std::function<void(int)>& fn);

  // Reads and clears rank i's device status; throws Error with the timed-out wait's story.
  void check_device_status(int i);

  struct Impl;

 private:
  explicit Team(std::unique_ptr<Impl> impl);
  // Owns `impl` (its destructor cleans up whatever was made, also on a throw) and gives it
  // the control window: the last step of every constructor.
  static std::unique_ptr<Team> with_ctrl(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage
