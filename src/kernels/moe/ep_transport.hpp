// Host launchers of the expert-parallel MoE transport kernels (ep_transport.cu). Each returns
// the launch error; waits inside are bounded and report through args.status.
#pragma once
#include <cuda_runtime.h>

#include "kernels/moe/ep_args.hpp"

namespace xstage::kernels::moe {

// Announces this call to every rank, counts this rank's rows per expert (and each row's slot),
// and sends the counts to every rank.
cudaError_t ep_launch_counts(const EpMoeArgs& a, cudaStream_t s);
// Waits for every rank's counts and announcement, then pushes each (token, choice) row to its
// expert's owner (fp8 row, scales, router weight, origin) and publishes the rows per owner.
// token_scales: a.x_scales holds one scale per token [T] (per-token activations), moved into the
// first group of the receive scales (the one the per-token Linear-1 reads); else [H/128, T].
cudaError_t ep_launch_dispatch(const EpMoeArgs& a, int ctas, cudaStream_t s, bool token_scales = false);
// Owner side: this rank's experts' counts/offsets for the grouped GEMMs, then waits until all
// rows it must receive have arrived.
cudaError_t ep_launch_layout(const EpMoeArgs& a, cudaStream_t s);
// Sends every received row's Linear-2 output to its token's owner (combine buffer).
cudaError_t ep_launch_combine(const EpMoeArgs& a, int ctas, cudaStream_t s);
// Waits for this rank's T * k combined rows, sums them per token into out (bf16).
cudaError_t ep_launch_reduce(const EpMoeArgs& a, int ctas, cudaStream_t s);

}  // namespace xstage::kernels::moe
