// Host launcher of the unfused layer's per-token activation step (ep_per_token.cu; the recipe in
// docs/megamoe.md "Per-token activations in the unfused layer"). No device code here.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace xstage::kernels::moe {

// h fp8 [rows, I] with per-128 scales [I/128, cap] (Linear-1's SwiGLU epilogue) -> the same codes
// requantised in place to one scale per row, tok_scales[row] = S = the row's largest 128-channel
// scale: q' = e4m3(e4m3^-1(q) * (s / S)), round to nearest even, saturating. Rows: those of the
// rank's experts (offsets[experts - 1] + counts[experts - 1], read on the device).
cudaError_t ep_launch_requant_per_token(uint8_t* h, const float* h_scales, float* tok_scales, const int* counts,
                                        const int* offsets, int experts, int cap, int intermediate, cudaStream_t s);

}  // namespace xstage::kernels::moe
