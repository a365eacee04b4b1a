// The X-Stage probe operator: validates a configuration, launches the probe kernel on rank 0
// of a single-process team, and turns its cycle records into a ProbePoint.
#pragma once
#include <memory>

#include "xstage/probe_data.hpp"
#include "xstage/team.hpp"

namespace xstage::ops {

class Prober {
 public:
  // Allocates a symmetric data buffer of buffer_bytes on every rank, measures the SM clock
  // and calibrates the FMA work loop. Needs a single-process team (Team::local).
  Prober(Team& team, size_t buffer_bytes);
  ~Prober();

  // Throws InvalidArgument for a configuration that cannot run here (K above the SM count,
  // B not a multiple of 16, negative gap, too few GPUs for the destination, too big for the
  // buffer...). Fills every measurement field of the returned point.
  ProbePoint measure(const ProbePoint& config);
  void validate(const ProbePoint& config) const;

  double clock_ghz() const;
  int sm_count() const;
  // Copy-engine peer bandwidth rank 0 -> rank 1 (GB/s, median of reps), the reference the
  // probe's sustained drain is compared with.
  double copy_engine_peer_gbps(size_t bytes, int reps);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage::ops
