// SM partition arithmetic for virtual ranks (xstage/virtual_ranks.hpp).
#include <fmt/format.h>

#include "xstage/virtual_ranks.hpp"

namespace xstage {

std::string plan_sm_split(int total_sms, int ranks, SmSplit* out, int granularity) {
  if (ranks < 1 || ranks > kMaxVirtualRanks)
    return fmt::format("virtual ranks must be 1..{}, got {}", kMaxVirtualRanks, ranks);
  if (total_sms < 1 || granularity < 1) return fmt::format("no SMs to split ({} SMs)", total_sms);
  const int per = total_sms / ranks / granularity * granularity;
  if (per < granularity)
    return fmt::format("{} SMs cannot be split into {} partitions of >= {} SMs (at most {} virtual ranks here)",
                       total_sms, ranks, granularity, total_sms / granularity);
  if (out) *out = SmSplit{ranks, per, total_sms - per * ranks};
  return {};
}

int max_virtual_ranks(int total_sms, int granularity) {
  for (int p = kMaxVirtualRanks; p >= 1; --p)
    if (plan_sm_split(total_sms, p, nullptr, granularity).empty()) return p;
  return 0;
}

std::string describe(const SmSplit& s) {
  return fmt::format("{} x {} SMs ({} unused)", s.ranks, s.sms_per_rank, s.unused);
}

}  // namespace xstage
