#include <fmt/format.h>

#include <chrono>

#include "kernels/selftest/exchange.hpp"
#include "runtime/check.hpp"
#include "xstage/ops/selftest.hpp"

namespace xstage::ops {

std::vector<ExchangeReport> exchange_selftest(Team& team, size_t slot_bytes, uint32_t salt) {
  if (slot_bytes == 0 || slot_bytes % 16 != 0)
    throw InvalidArgument(fmt::format("exchange selftest: slot bytes must be a positive multiple of 16, got {}",
                                      slot_bytes));
  const int world = team.world_size();
  SymmetricBuffer& buf = team.alloc_symmetric(slot_bytes * world);
  std::vector<ExchangeReport> out(team.local_count());
  team.run([&](int i) {
    cudaStream_t s = team.stream(i);
    TeamDevice t = team.device_view(i);
    // Poison what we will receive so an unwritten slot can never pass.
    XS_CUDA(cudaMemsetAsync(buf.local[i], 0xA5, slot_bytes * world, s), "poisoning the receive buffer");
    // Nobody may write into a peer before that peer has poisoned its copy.
    XS_CUDA(kernels::launch_team_barrier(t, team.next_epoch(i), s), "launching the barrier before the exchange");
    XS_CUDA(kernels::launch_exchange_write(t, buf.peers[i], slot_bytes, salt, s), "launching the exchange writes");
    XS_CUDA(kernels::launch_team_barrier(t, team.next_epoch(i), s), "launching the barrier after the exchange");
    unsigned long long* bad = nullptr;
    XS_CUDA(cudaMallocAsync(&bad, sizeof(unsigned long long) * world, s), "allocating mismatch counters");
    XS_CUDA(cudaMemsetAsync(bad, 0, sizeof(unsigned long long) * world, s), "clearing mismatch counters");
    XS_CUDA(kernels::launch_exchange_verify(t, static_cast<const uint32_t*>(buf.local[i]), slot_bytes, salt, bad, s),
            "launching the exchange check");
    out[i].rank = team.rank(i);
    out[i].slot_bytes = slot_bytes;
    out[i].wrong_words.resize(world);
    XS_CUDA(cudaMemcpyAsync(out[i].wrong_words.data(), bad, sizeof(unsigned long long) * world,
                            cudaMemcpyDeviceToHost, s),
            "reading mismatch counters");
    XS_CUDA(cudaFreeAsync(bad, s), "freeing mismatch counters");
    XS_CUDA(cudaStreamSynchronize(s), "running the exchange selftest");
    team.check_device_status(i);
  });
  team.free_symmetric(buf);
  return out;
}

std::string timeout_selftest(Team& team, int i, double* seconds) {
  XS_CUDA(cudaSetDevice(team.device(i)), "selecting the rank's GPU");
  cudaStream_t s = team.stream(i);
  auto t0 = std::chrono::steady_clock::now();
  XS_CUDA(kernels::launch_wait_never_set(team.device_view(i), CtrlLayout::kUserFlags, s),
          "launching the timeout selftest");
  XS_CUDA(cudaStreamSynchronize(s), "running the timeout selftest");
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  try {
    team.check_device_status(i);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace xstage::ops
