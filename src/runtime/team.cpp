#include "xstage/team.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <list>
#include <mutex>
#include <thread>

#include "runtime/check.hpp"
#include "runtime/nccl_v228.hpp"
#include "xstage/rendezvous.hpp"

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
  };
  std::vector<Rank> ranks;
  std::list<SymmetricBuffer> buffers;  // list: references stay valid
  SymmetricBuffer* ctrl = nullptr;
  // Next free byte of the control window for reserve_ctrl (the first 4 KiB of the user area
  // stay with the selftests).
  size_t ctrl_next = CtrlLayout::kUserFlags + 4096;
  double timeout_s = 5.0;

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
    XS_CUDA(cudaMalloc(&r.status, sizeof(DeviceStatus)), "allocating the device status record");
    XS_CUDA(cudaMemset(r.status, 0, sizeof(DeviceStatus)), "clearing the device status record");
  }
}

}  // namespace

Team::Team(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

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
  std::unique_ptr<Team> t(new Team(std::move(impl)));
  t->impl_->ctrl = &t->alloc_symmetric(CtrlLayout::kBytes);
  return t;
}

std::unique_ptr<Team> Team::from_launcher(const TeamOptions& opts, const LaunchEnv& env) {
  keep_nvlink_multicast_off();
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (env.local_rank >= n)
    throw InvalidArgument(fmt::format("LOCAL_RANK={} but only {} GPUs are visible to this process; start at most "
                                      "{} ranks per node (one per GPU)",
                                      env.local_rank, n, n));
  if (env.world_size < opts.min_gpus)
    throw InvalidArgument(fmt::format("this needs at least {} ranks but WORLD_SIZE={}", opts.min_gpus, env.world_size));
  if (env.world_size > n)
    throw InvalidArgument(fmt::format("WORLD_SIZE={} but this node has {} GPUs; xstage needs all ranks on one "
                                      "NVLink node, one GPU each",
                                      env.world_size, n));
  std::vector<int> all(env.world_size);
  for (int i = 0; i < env.world_size; ++i) all[i] = i;
  require_peer_access(all);
  XS_CUDA(cudaSetDevice(env.local_rank), fmt::format("selecting GPU {}", env.local_rank));
  ncclUniqueId id{};
  std::vector<char> blob;
  if (env.rank == 0) {
    XS_NCCL(ncclGetUniqueId(&id), "creating the NCCL unique id");
    blob.assign(reinterpret_cast<char*>(&id), reinterpret_cast<char*>(&id) + sizeof id);
  }
  blob = rendezvous_broadcast(env, blob);
  if (blob.size() != sizeof id) throw Error("rendezvous: received an NCCL id of the wrong size");
  std::memcpy(&id, blob.data(), sizeof id);
  auto impl = std::make_unique<Impl>();
  impl->world = env.world_size;
  impl->timeout_s = opts.wait_timeout_s;
  Impl::Rank r;
  r.rank = env.rank;
  r.device = env.local_rank;
  XS_NCCL(ncclCommInitRank(&r.comm, env.world_size, id, env.rank),
          fmt::format("joining the NCCL communicator as rank {} of {}", env.rank, env.world_size));
  impl->ranks.push_back(r);
  finish_setup(*impl);
  std::unique_ptr<Team> t(new Team(std::move(impl)));
  t->impl_->ctrl = &t->alloc_symmetric(CtrlLayout::kBytes);
  return t;
}

namespace {
// Deregister on every local rank, then free (sequential deregistration ran fine on 2.28.9
// in single-process mode, where the destructor has always done it this way).
void release_buffer(Team::Impl& t, SymmetricBuffer& b) {
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
    if (r.stream) cudaStreamDestroy(r.stream);
    if (r.status) cudaFree(r.status);
  }
  for (auto& r : impl_->ranks) ncclCommDestroy(r.comm);
}

int Team::world_size() const { return impl_->world; }
int Team::local_count() const { return static_cast<int>(impl_->ranks.size()); }
int Team::rank(int i) const { return impl_->ranks.at(i).rank; }
int Team::device(int i) const { return impl_->ranks.at(i).device; }
cudaStream_t Team::stream(int i) const { return impl_->ranks.at(i).stream; }
ncclComm_t Team::comm(int i) const { return impl_->ranks.at(i).comm; }
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
  d.ctrl = impl_->ctrl ? impl_->ctrl->window[i] : nullptr;
  d.status = r.status;
  d.timeout_ns = static_cast<uint64_t>(impl_->timeout_s * 1e9);
  return d;
}

SymmetricBuffer& Team::alloc_symmetric(size_t bytes) {
  if (bytes == 0) throw InvalidArgument("symmetric buffer of 0 bytes");
  SymmetricBuffer b;
  b.bytes = bytes;
  b.local.resize(impl_->ranks.size());
  b.window.resize(impl_->ranks.size());
  const std::string what = fmt::format("allocating a symmetric buffer of {} bytes", bytes);
  int current = 0;
  XS_CUDA(cudaGetDevice(&current), what);
  for (size_t i = 0; i < impl_->ranks.size(); ++i) {
    XS_CUDA(cudaSetDevice(impl_->ranks[i].device), what);
    XS_NCCL(ncclMemAlloc(&b.local[i], bytes), what);
    XS_CUDA(cudaMemset(b.local[i], 0, bytes), what);
    XS_CUDA(cudaDeviceSynchronize(), what);
  }
  impl_->collective(what.c_str(), [&](Impl::Rank& r) {
    const size_t k = static_cast<size_t>(&r - impl_->ranks.data());
    nccl::window_register(r.comm, b.local[k], bytes, &b.window[k]);
  });
  XS_CUDA(cudaSetDevice(current), what);
  impl_->buffers.push_back(std::move(b));
  return impl_->buffers.back();
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
