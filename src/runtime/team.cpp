#include "xstage/team.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "runtime/check.hpp"
#include "runtime/coresidency.hpp"
#include "runtime/green_contexts.hpp"
#include "runtime/nccl_v228.hpp"
#include "runtime/window_peers.hpp"
#include "xstage/rendezvous.hpp"
#include "xstage/virtual_ranks.hpp"

namespace xstage {

struct Team::Impl {
  int world = 0;
  struct Rank {
    int rank = 0;
    int device = 0;
    ncclComm_t comm = nullptr;
    ncclDevComm devcomm{};
    bool devcomm_ok = false;
    cudaStream_t stream = nullptr;
    DeviceStatus* status = nullptr;
    uint64_t epoch = 0;
    int sm_count = 0;
    cudaEvent_t a2a_ready = nullptr;  // virtual all_to_all: this rank's send is complete
    cudaEvent_t a2a_done = nullptr;   // virtual all_to_all: this rank has read its peers
    const void* a2a_send = nullptr;
  };
  std::vector<Rank> ranks;
  std::list<SymmetricBuffer> buffers;  // list: references stay valid
  SymmetricBuffer* ctrl = nullptr;
  // Next free byte of the control window for reserve_ctrl (the first 4 KiB of the user area
  // stay with the selftests).
  size_t ctrl_next = CtrlLayout::kUserFlags + 4096;
  double timeout_s = 5.0;
  bool virt = false;          // virtual ranks: SM partitions of one GPU, no NCCL
  green::Partitions green;    // virtual ranks on green contexts (empty: reduced grids)
  std::string story;          // how the SMs are split

  // Host rendezvous of the local ranks' threads (virtual all_to_all), bounded by timeout_s.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  void host_barrier(int rank, const char* what) {
    std::unique_lock<std::mutex> lk(mu);
    const uint64_t gen = generation;
    if (++arrived == static_cast<int>(ranks.size())) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const auto limit = std::chrono::duration<double>(timeout_s);
    if (!cv.wait_for(lk, limit, [&] { return generation != gen; })) {
      --arrived;
      throw Error(fmt::format("rank {}: {}: not every rank arrived within {} s (a rank that never calls, or "
                              "called with a different shape?)",
                              rank, what, timeout_s));
    }
  }

  // Collective NCCL calls: in local mode one thread issues them for every rank inside a group.
  // The caller's current GPU is restored afterwards.
  template <class F>
  void collective(const char* what, F&& per_rank) {
    int current = 0;
    XS_CUDA(cudaGetDevice(&current), what);
    if (ranks.size() > 1) XS_NCCL(ncclGroupStart(), what);
    for (auto& r : ranks) {
      XS_CUDA(cudaSetDevice(r.device), what);
      per_rank(r);
    }
    if (ranks.size() > 1) XS_NCCL(ncclGroupEnd(), what);
    XS_CUDA(cudaSetDevice(current), what);
  }
};

namespace {

void keep_nvlink_multicast_off() {
  // Policy of this workplace and of xstage: never NVLink SHARP/multicast.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
}

// Every ordered pair of the ranks' GPUs must reach each other with loads/stores.
void require_peer_access(const std::vector<int>& devs) {
  for (int a : devs)
    for (int b : devs) {
      if (a == b) continue;
      int can = 0;
      XS_CUDA(cudaDeviceCanAccessPeer(&can, a, b), fmt::format("asking peer access GPU {} -> GPU {}", a, b));
      if (!can)
        throw InvalidArgument(fmt::format(
            "GPU {} cannot access GPU {} directly (no peer access); xstage needs NVLink/P2P between all ranks' "
            "GPUs - check `nvidia-smi topo -m` or pick GPUs with CUDA_VISIBLE_DEVICES",
            a, b));
    }
}

void alloc_status(Team::Impl::Rank& r) {
  XS_CUDA(cudaMalloc(&r.status, sizeof(DeviceStatus)), "allocating the device status record");
  XS_CUDA(cudaMemset(r.status, 0, sizeof(DeviceStatus)), "clearing the device status record");
}

void finish_setup(Team::Impl& t) {
  t.collective("creating NCCL device communicators", [](Team::Impl::Rank& r) {
    nccl::dev_comm_create(r.comm, /*lsa_barriers=*/16, &r.devcomm);
    r.devcomm_ok = true;
  });
  for (auto& r : t.ranks) {
    if (nccl::lsa_size(r.devcomm) != t.world)
      throw Error(fmt::format("rank {}: only {} of {} ranks are reachable over NVLink load/store (LSA team); xstage "
                              "kernels need every rank in one NVLink domain",
                              r.rank, nccl::lsa_size(r.devcomm), t.world));
    XS_CUDA(cudaSetDevice(r.device), "selecting GPU");
    XS_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "creating a stream");
    XS_CUDA(cudaDeviceGetAttribute(&r.sm_count, cudaDevAttrMultiProcessorCount, r.device), "reading the SM count");
    alloc_status(r);
  }
}

}  // namespace

Team::Team(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Team> Team::with_ctrl(std::unique_ptr<Impl> impl) {
  std::unique_ptr<Team> t(new Team(std::move(impl)));
  t->impl_->ctrl = &t->alloc_symmetric(CtrlLayout::kBytes);
  return t;
}

std::unique_ptr<Team> Team::local(const TeamOptions& opts) {
  keep_nvlink_multicast_off();
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) n = 0;
  int want = opts.gpus == 0 ? n : opts.gpus;
  if (opts.gpus < 0) throw InvalidArgument(fmt::format("--gpus must be >= 0 (0 = all), got {}", opts.gpus));
  if (want > n)
    throw InvalidArgument(fmt::format("asked for {} GPUs but only {} are visible; lower --gpus or check "
                                      "CUDA_VISIBLE_DEVICES",
                                      want, n));
  if (want < opts.min_gpus)
    throw InvalidArgument(fmt::format("this needs at least {} GPUs but {} {} available", opts.min_gpus, want,
                                      want == 1 ? "is" : "are"));
  if (want > kMaxTeamSize)
    throw InvalidArgument(fmt::format("{} GPUs asked for: xstage teams have at most {} ranks", want, kMaxTeamSize));
  auto impl = std::make_unique<Impl>();
  impl->world = want;
  impl->timeout_s = opts.wait_timeout_s;
  std::vector<int> devs(want);
  for (int i = 0; i < want; ++i) devs[i] = i;
  require_peer_access(devs);
  std::vector<ncclComm_t> comms(want);
  XS_NCCL(ncclCommInitAll(comms.data(), want, devs.data()),
          fmt::format("creating an NCCL communicator over {} local GPUs", want));
  for (int i = 0; i < want; ++i) {
    Impl::Rank r;
    r.rank = i;
    r.device = i;
    r.comm = comms[i];
    impl->ranks.push_back(r);
  }
  finish_setup(*impl);
  return with_ctrl(std::move(impl));
}

namespace {

// The checks both one-process-per-GPU entry points make before joining.
void check_rank_placement(const TeamOptions& opts, int rank, int world, int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (world < 1 || rank < 0 || rank >= world)
    throw InvalidArgument(fmt::format("rank {} of world size {} is not a valid rank", rank, world));
  if (device < 0 || device >= n)
    throw InvalidArgument(fmt::format("GPU {} requested (LOCAL_RANK) but only {} GPUs are visible to this process; "
                                      "start at most {} ranks per node (one per GPU)",
                                      device, n, n));
  if (world < opts.min_gpus)
    throw InvalidArgument(fmt::format("this needs at least {} ranks but WORLD_SIZE={}", opts.min_gpus, world));
  if (world > n)
    throw InvalidArgument(fmt::format("WORLD_SIZE={} but this node has {} GPUs; xstage needs all ranks on one "
                                      "NVLink node, one GPU each (or virtual ranks on one GPU)",
                                      world, n));
  if (world > kMaxTeamSize)
    throw InvalidArgument(fmt::format("WORLD_SIZE={}: xstage teams have at most {} ranks", world, kMaxTeamSize));
  std::vector<int> all(world);
  for (int i = 0; i < world; ++i) all[i] = i;
  require_peer_access(all);
}

std::unique_ptr<Team::Impl> join_with_id(const TeamOptions& opts, int rank, int world, int device,
                                         const std::vector<char>& blob) {
  ncclUniqueId id{};
  if (blob.size() != sizeof id)
    throw InvalidArgument(fmt::format("an NCCL unique id is {} bytes, got {}", sizeof id, blob.size()));
  std::memcpy(&id, blob.data(), sizeof id);
  XS_CUDA(cudaSetDevice(device), fmt::format("selecting GPU {}", device));
  auto impl = std::make_unique<Team::Impl>();
  impl->world = world;
  impl->timeout_s = opts.wait_timeout_s;
  Team::Impl::Rank r;
  r.rank = rank;
  r.device = device;
  XS_NCCL(ncclCommInitRank(&r.comm, world, id, rank),
          fmt::format("joining the NCCL communicator as rank {} of {}", rank, world));
  impl->ranks.push_back(r);
  finish_setup(*impl);
  return impl;
}

}  // namespace

std::vector<char> Team::new_unique_id() {
  ncclUniqueId id{};
  XS_NCCL(ncclGetUniqueId(&id), "creating the NCCL unique id");
  return std::vector<char>(reinterpret_cast<char*>(&id), reinterpret_cast<char*>(&id) + sizeof id);
}

std::unique_ptr<Team> Team::from_unique_id(const TeamOptions& opts, int rank, int world, int device,
                                           const std::vector<char>& id) {
  keep_nvlink_multicast_off();
  check_rank_placement(opts, rank, world, device);
  return with_ctrl(join_with_id(opts, rank, world, device, id));
}

std::unique_ptr<Team> Team::from_launcher(const TeamOptions& opts, const LaunchEnv& env) {
  keep_nvlink_multicast_off();
  check_rank_placement(opts, env.rank, env.world_size, env.local_rank);
  XS_CUDA(cudaSetDevice(env.local_rank), fmt::format("selecting GPU {}", env.local_rank));
  std::vector<char> blob;
  if (env.rank == 0) blob = new_unique_id();
  blob = rendezvous_broadcast(env, blob);
  return with_ctrl(join_with_id(opts, env.rank, env.world_size, env.local_rank, blob));
}

namespace {

// Virtual ranks' streams must run kernels side by side (docs/virtual-ranks.md §Co-residency).
// Checks streams() up to 3 times, calling remake() after a failed try; returns the number of
// remakes it took, or throws `what` with the streams that waited alone.
int check_until_coresident(const std::function<std::vector<cudaStream_t>()>& streams,
                           const std::function<void()>& remake, const std::string& what) {
  constexpr int kTries = 3;
  constexpr double kWaitS = 2.0;
  for (int attempt = 1;; ++attempt) {
    const runtime::CoresidencyCheck c = runtime::check_coresident(streams(), kWaitS);
    if (!c.error.empty()) throw Error(what + ": " + c.error);
    if (c.alone.empty()) return attempt - 1;
    if (attempt == kTries) {
      const char* conn = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
      throw Error(fmt::format(
          "{}: kernels on streams {} waited {} s alone in each of {} tries: they cannot run side by side; "
          "CUDA_DEVICE_MAX_CONNECTIONS is {} (export 32 before CUDA starts), or try reduced grids",
          what, fmt::join(c.alone, ","), kWaitS, kTries, conn ? conn : "unset (8)"));
    }
    remake();
  }
}

// The ranks' streams, remade (in their green contexts, or plain) until they pass the check.
void ensure_coresident(Team::Impl& t) {
  auto streams = [&] {
    std::vector<cudaStream_t> s;
    for (const auto& r : t.ranks) s.push_back(r.stream);
    return s;
  };
  auto remake = [&] {
    if (!t.green.contexts.empty()) {
      XS_CUDA(green::remake_streams(t.green), "remaking the virtual ranks' streams");
      for (size_t i = 0; i < t.ranks.size(); ++i) t.ranks[i].stream = t.green.streams[i];
      return;
    }
    for (auto& r : t.ranks) {
      cudaStreamDestroy(r.stream);
      r.stream = nullptr;
      XS_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "remaking a virtual rank's stream");
    }
  };
  if (int n = check_until_coresident(streams, remake, "virtual ranks"); n > 0)
    t.story += fmt::format("; streams remade {} time(s) to pass the co-residency check", n);
}

}  // namespace

std::unique_ptr<Team> Team::virtual_ranks(int P, const TeamOptions& opts) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (n == 0) throw InvalidArgument("virtual ranks need a GPU, and none is visible");
  const int dev = opts.virtual_device;
  if (dev < 0 || dev >= n)
    throw InvalidArgument(fmt::format("virtual ranks on GPU {} but only {} GPUs are visible", dev, n));
  if (P < opts.min_gpus)
    throw InvalidArgument(fmt::format("this needs at least {} ranks but --virtual-ranks is {}", opts.min_gpus, P));
  int sms = 0;
  XS_CUDA(cudaSetDevice(dev), fmt::format("selecting GPU {}", dev));
  XS_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "reading the SM count");
  SmSplit plan;
  if (std::string why = plan_sm_split(sms, P, &plan); !why.empty()) throw InvalidArgument(why);
  XS_CUDA(cudaFree(nullptr), "initialising the GPU's primary context");

  auto impl = std::make_unique<Impl>();
  impl->world = P;
  impl->timeout_s = opts.wait_timeout_s;
  impl->virt = true;
  using Mode = TeamOptions::SmPartition;
  std::string green_why = "not asked for";
  if (opts.partition != Mode::reduced_grids) green_why = green::create(dev, plan, &impl->green);
  if (!green_why.empty() && opts.partition == Mode::green_contexts)
    throw Error("virtual ranks: green contexts are not usable here: " + green_why);
  const bool on_green = green_why.empty();
  const int per_rank = on_green ? impl->green.sms_per_rank : plan.sms_per_rank;
  impl->story = on_green ? fmt::format("green contexts, {} x {} SMs ({} unused)", P, per_rank, impl->green.unused)
                         : fmt::format("reduced grids on plain streams, {} x {} SMs ({} unused; green contexts: {})",
                                       P, per_rank, plan.unused, green_why);
  if (green::lazy_module_loading())
    impl->story += "; lazy module loading is on: export CUDA_MODULE_LOADING=EAGER before CUDA starts, or a "
                   "kernel's first launch can wait behind another rank's waiting kernel";
  // The Team owns the ranks before their streams, status records and events are made, so its
  // destructor frees whatever a failure part-way left.
  impl->ranks.resize(P);
  std::unique_ptr<Team> t(new Team(std::move(impl)));
  for (int i = 0; i < P; ++i) {
    Impl::Rank& r = t->impl_->ranks[i];
    r.rank = i;
    r.device = dev;
    r.sm_count = per_rank;
    if (on_green)
      r.stream = t->impl_->green.streams[i];
    else
      XS_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "creating a stream");
    alloc_status(r);
    XS_CUDA(cudaEventCreateWithFlags(&r.a2a_ready, cudaEventDisableTiming), "creating an event");
    XS_CUDA(cudaEventCreateWithFlags(&r.a2a_done, cudaEventDisableTiming), "creating an event");
  }
  ensure_coresident(*t->impl_);
  t->impl_->ctrl = &t->alloc_symmetric(CtrlLayout::kBytes);
  return t;
}

namespace {
// Deregister on every local rank, then free (sequential deregistration ran fine on 2.28.9
// in single-process mode, where the destructor has always done it this way).
void release_buffer(Team::Impl& t, SymmetricBuffer& b) {
  if (t.virt) {
    cudaSetDevice(t.ranks[0].device);
    for (void* p : b.local) cudaFree(p);
    return;
  }
  for (size_t i = 0; i < b.local.size(); ++i) {
    cudaSetDevice(t.ranks[i].device);
    nccl::window_deregister(t.ranks[i].comm, b.window[i]);
  }
  for (size_t i = 0; i < b.local.size(); ++i) {
    cudaSetDevice(t.ranks[i].device);
    ncclMemFree(b.local[i]);
  }
}
}  // namespace

void Team::free_symmetric(SymmetricBuffer& buf) {
  for (auto it = impl_->buffers.begin(); it != impl_->buffers.end(); ++it)
    if (&*it == &buf) {
      int current = 0;
      cudaGetDevice(&current);
      for (const auto& r : impl_->ranks) {
        XS_CUDA(cudaSetDevice(r.device), "freeing a symmetric buffer");
        XS_CUDA(cudaDeviceSynchronize(), "waiting for work on a symmetric buffer before freeing it");
      }
      release_buffer(*impl_, *it);
      impl_->buffers.erase(it);
      cudaSetDevice(current);
      return;
    }
  throw InvalidArgument("free_symmetric: the buffer does not belong to this team");
}

Team::~Team() {
  if (!impl_) return;
  for (auto& b : impl_->buffers) release_buffer(*impl_, b);
  for (auto& r : impl_->ranks) {
    cudaSetDevice(r.device);
    if (r.devcomm_ok) nccl::dev_comm_destroy(r.comm, &r.devcomm);
    if (r.stream && impl_->green.streams.empty()) cudaStreamDestroy(r.stream);
    if (r.status) cudaFree(r.status);
    if (r.a2a_ready) cudaEventDestroy(r.a2a_ready);
    if (r.a2a_done) cudaEventDestroy(r.a2a_done);
  }
  green::destroy(impl_->green);  // its streams are the ranks' streams
  for (auto& r : impl_->ranks)
    if (r.comm) ncclCommDestroy(r.comm);
}

int Team::world_size() const { return impl_->world; }
int Team::local_count() const { return static_cast<int>(impl_->ranks.size()); }
int Team::rank(int i) const { return impl_->ranks.at(i).rank; }
int Team::device(int i) const { return impl_->ranks.at(i).device; }
cudaStream_t Team::stream(int i) const { return impl_->ranks.at(i).stream; }
ncclComm_t Team::comm(int i) const {
  if (impl_->virt)
    throw InvalidArgument("a team of virtual ranks has no NCCL communicator (NCCL takes one rank per GPU)");
  return impl_->ranks.at(i).comm;
}
bool Team::is_virtual() const { return impl_->virt; }
const char* Team::kind() const { return impl_->virt ? "virtual" : "gpus"; }
int Team::sm_count(int i) const { return impl_->ranks.at(i).sm_count; }
std::string Team::partition_story() const { return impl_->story; }

cudaStream_t Team::create_stream(int i) {
  auto make = [&] {
    cudaStream_t s = nullptr;
    if (!impl_->green.contexts.empty())
      XS_CUDA(green::create_stream(impl_->green, i, &s), "creating a stream in a virtual rank's SM partition");
    else
      XS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream");
    return s;
  };
  if (!impl_->virt) return make();
  // A virtual rank's side stream runs beside every rank's stream: checked with them (after
  // they drain, so queued work is not taken for a shared queue).
  for (int r = 0; r < local_count(); ++r) synchronize(r, "creating a side stream");
  cudaStream_t s = make();
  auto streams = [&] {
    std::vector<cudaStream_t> all;
    for (const auto& r : impl_->ranks) all.push_back(r.stream);
    all.push_back(s);
    return all;
  };
  auto remake = [&] {
    cudaStreamDestroy(s);
    s = nullptr;
    s = make();
  };
  try {
    check_until_coresident(streams, remake, fmt::format("virtual ranks: rank {}'s side stream", i));
  } catch (...) {
    if (s) cudaStreamDestroy(s);
    throw;
  }
  return s;
}

void Team::synchronize(int i, const std::string& what) const {
  const auto& r = impl_->ranks.at(i);
  // Device waits end within timeout_s each; a kernel that never starts cannot fire one, so
  // the host bound is generous but finite.
  const double bound = std::max(60.0, 20.0 * impl_->timeout_s);
  cudaError_t e = cudaSuccess;
  if (!runtime::wait_stream_bounded(r.stream, bound, &e))
    throw Error(fmt::format("{}: rank {}'s stream did not finish within {:.0f} s (a kernel that never started?)",
                            what, r.rank, bound));
  XS_CUDA(e, what);
}
const SymmetricBuffer& Team::ctrl() const { return *impl_->ctrl; }
uint64_t Team::next_epoch(int i) { return ++impl_->ranks.at(i).epoch; }

size_t Team::reserve_ctrl(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (bytes == 0 || impl_->ctrl_next + rounded > CtrlLayout::kBytes)
    throw Error(fmt::format("control window full: cannot reserve {} bytes ({} of {} in use)", bytes, impl_->ctrl_next,
                            CtrlLayout::kBytes));
  const size_t off = impl_->ctrl_next;
  impl_->ctrl_next += rounded;
  return off;
}

TeamDevice Team::device_view(int i) const {
  const auto& r = impl_->ranks.at(i);
  TeamDevice d;
  d.rank = r.rank;
  d.world = impl_->world;
  if (impl_->ctrl) d.ctrl = impl_->ctrl->peers[i];
  d.status = r.status;
  d.timeout_ns = static_cast<uint64_t>(impl_->timeout_s * 1e9);
  return d;
}

SymmetricBuffer& Team::alloc_symmetric(size_t bytes) {
  if (bytes == 0) throw InvalidArgument("symmetric buffer of 0 bytes");
  const int n = static_cast<int>(impl_->ranks.size());
  SymmetricBuffer b;
  b.bytes = bytes;
  b.local.resize(n);
  b.window.resize(n);
  b.peers.resize(n);
  const std::string what = fmt::format("allocating a symmetric buffer of {} bytes", bytes);
  int current = 0;
  XS_CUDA(cudaGetDevice(&current), what);
  if (impl_->virt) {
    // One allocation per rank on the shared GPU; every rank sees every copy directly.
    XS_CUDA(cudaSetDevice(impl_->ranks[0].device), what);
    for (int i = 0; i < n; ++i) {
      cudaError_t e = cudaMalloc(&b.local[i], bytes);
      if (e != cudaSuccess) {
        for (int k = 0; k < i; ++k) cudaFree(b.local[k]);
        XS_CUDA(e, what);
      }
      XS_CUDA(cudaMemset(b.local[i], 0, bytes), what);
    }
    XS_CUDA(cudaDeviceSynchronize(), what);
    for (int i = 0; i < n; ++i)
      for (int p = 0; p < n; ++p) b.peers[i].base[p] = static_cast<char*>(b.local[p]);
  } else {
    for (int i = 0; i < n; ++i) {
      XS_CUDA(cudaSetDevice(impl_->ranks[i].device), what);
      XS_NCCL(ncclMemAlloc(&b.local[i], bytes), what);
      XS_CUDA(cudaMemset(b.local[i], 0, bytes), what);
      XS_CUDA(cudaDeviceSynchronize(), what);
    }
    impl_->collective(what.c_str(), [&](Impl::Rank& r) {
      const size_t k = static_cast<size_t>(&r - impl_->ranks.data());
      nccl::window_register(r.comm, b.local[k], bytes, &b.window[k]);
    });
    for (int i = 0; i < n; ++i) {
      XS_CUDA(cudaSetDevice(impl_->ranks[i].device), what);
      XS_CUDA(nccl::resolve_window_peers(b.window[i], impl_->world, &b.peers[i]), what + ": peer addresses");
    }
  }
  XS_CUDA(cudaSetDevice(current), what);
  impl_->buffers.push_back(std::move(b));
  return impl_->buffers.back();
}

void Team::all_to_all(int i, const void* send, void* recv, size_t bytes_per_peer, cudaStream_t s) {
  Impl::Rank& me = impl_->ranks.at(i);
  const std::string what = fmt::format("all-to-all of {} bytes per peer (rank {})", bytes_per_peer, me.rank);
  if (!impl_->virt) {
    XS_NCCL(ncclAlltoAll(send, recv, bytes_per_peer, ncclChar, me.comm, s), what);
    return;
  }
  // Copies between the ranks' buffers on the one GPU, ordered by events: every rank's send
  // must be complete before anyone reads it, and nobody reuses its send buffer until every
  // rank has read it.
  me.a2a_send = send;
  XS_CUDA(cudaEventRecord(me.a2a_ready, s), what);
  impl_->host_barrier(me.rank, "all-to-all");
  for (size_t p = 0; p < impl_->ranks.size(); ++p) {
    const Impl::Rank& peer = impl_->ranks[p];
    XS_CUDA(cudaStreamWaitEvent(s, peer.a2a_ready), what);
    XS_CUDA(cudaMemcpyAsync(static_cast<char*>(recv) + p * bytes_per_peer,
                            static_cast<const char*>(peer.a2a_send) + static_cast<size_t>(me.rank) * bytes_per_peer,
                            bytes_per_peer, cudaMemcpyDeviceToDevice, s),
            what);
  }
  XS_CUDA(cudaEventRecord(me.a2a_done, s), what);
  impl_->host_barrier(me.rank, "all-to-all");
  for (const auto& peer : impl_->ranks) XS_CUDA(cudaStreamWaitEvent(s, peer.a2a_done), what);
}

void Team::run(const std::function<void(int)>& fn) {
  const int n = local_count();
  std::vector<std::exception_ptr> errs(n);
  auto body = [&](int i) {
    try {
      XS_CUDA(cudaSetDevice(device(i)), "selecting the rank's GPU");
      fn(i);
    } catch (...) {
      errs[i] = std::current_exception();
    }
  };
  if (n == 1) {
    body(0);
  } else {
    std::vector<std::thread> th;
    for (int i = 0; i < n; ++i) th.emplace_back(body, i);
    for (auto& t : th) t.join();
  }
  for (int i = 0; i < n; ++i)
    if (errs[i]) {
      try {
        std::rethrow_exception(errs[i]);
      } catch (const InvalidArgument&) {
        throw;
      } catch (const std::exception& e) {
        std::string msg = e.what();
        // Timeout stories already start with the rank.
        if (msg.rfind("rank ", 0) == 0) throw Error(msg);
        throw Error(fmt::format("rank {}: {}", rank(i), msg));
      }
    }
}

void Team::check_device_status(int i) {
  const auto& r = impl_->ranks.at(i);
  DeviceStatus s{};
  XS_CUDA(cudaSetDevice(r.device), "selecting GPU");
  XS_CUDA(cudaMemcpy(&s, r.status, sizeof s, cudaMemcpyDeviceToHost), "reading the device status record");
  if (s.code == 0) return;
  XS_CUDA(cudaMemset(r.status, 0, sizeof s), "clearing the device status record");
  throw Error(describe_device_status(s));
}

}  // namespace xstage
