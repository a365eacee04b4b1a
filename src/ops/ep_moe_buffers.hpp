// Buffers of an expert-parallel MoE layer shared by the unfused layer (ep_moe_op.cpp) and the
// Mega-MoE kernel (mega_moe_op.cpp): the symmetric receive / combine buffers and control
// flags, resolved into every rank's EpMoeArgs, plus the per-rank row-slot scratch. Collective
// to create and destroy, like the layers that own it.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/moe/ep_args.hpp"
#include "xstage/ops/ep_moe.hpp"
#include "xstage/team.hpp"

namespace xstage::ops {

struct EpMoeBuffers {
  Team& team;
  EpMoeConfig cfg;
  int world = 0, epr = 0, cap = 0;
  std::vector<kernels::moe::EpMoeArgs> args;  // per local index; epoch 0, inputs unset
  std::vector<int> sm_count;                 // per local index

  // Validates cfg (validate_ep_moe) and allocates; `what` names the owner in errors.
  EpMoeBuffers(Team& team, const EpMoeConfig& cfg, const char* what);
  ~EpMoeBuffers();
  EpMoeBuffers(const EpMoeBuffers&) = delete;
  EpMoeBuffers& operator=(const EpMoeBuffers&) = delete;

  // Checks a call's inputs (null, alignment), sets them and the next epoch in a copy of rank
  // i's args; throws InvalidArgument naming the input.
  kernels::moe::EpMoeArgs next_call(int i, const EpMoeRankInputs& in);
  // The weight format, layout and activation scales of a call and their combination (part of
  // next_call; also for a layer that must check them before its own argument checks).
  void check_formats(const EpMoeRankInputs& in) const;

 private:
  SymmetricBuffer* sym_ = nullptr;
  std::vector<int32_t*> row_slot_;
  const char* what_;
};

}  // namespace xstage::ops
