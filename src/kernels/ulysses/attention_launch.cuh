// The Ulysses attention kernels: the shipped attention mainloop (non-causal; DiT attention)
// with a Ulysses epilogue. Included by the attention_<dtype>_d<dim>.cu files, one per
// translation unit so they compile in parallel.
#pragma once
#include "kernels/attention/kernel.cuh"
#include "kernels/ulysses/destinations.cuh"
#include "kernels/ulysses/launch.hpp"
#include "kernels/ulysses/shaped_epilogue.cuh"

namespace xstage::kernels::ulysses {

// fused and one-chunk fused-shaped: one kernel, UlyssesArgs::defer_slices picks (see
// shaped_epilogue.cuh); fused-shaped with several chunks per slice: the hooked mainloop.
template <class Traits>
using FusedEpilogue = ShapedTileEpilogue<Traits, RemoteDestination<typename Traits::Element>, /*kSpread=*/false>;
template <class Traits>
using FusedShapedEpilogue = ShapedTileEpilogue<Traits, RemoteDestination<typename Traits::Element>, /*kSpread=*/true>;
template <class Traits>
using FlaggedLocalEpilogue = attention::TileStoreEpilogue<Traits, FlaggedLocalDestination<typename Traits::Element>>;

template <class Element, int kHeadDim>
cudaError_t launch_ulysses_attention(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                                     cudaStream_t s) {
  constexpr attention::TileConfig c = attention::tile_config(kHeadDim);
  using Tr = attention::AttentionTraits<Element, kHeadDim, c.block_m, c.block_n, c.stages, /*causal=*/false,
                                         c.lazy_rescale>;
  if (p.causal) return cudaErrorInvalidValue;
  switch (kind) {
    case EpilogueKind::fused: {
      UlyssesArgs now = u;
      now.defer_slices = 0;
      using K = attention::AttentionKernel<Tr, FusedEpilogue>;
      return attention::launch_attention<K>(p, typename K::Epilogue::Params{RemoteDestination<Element>{now}, p.q_len}, s);
    }
    case EpilogueKind::fused_shaped: {
      // A plan of one chunk per slice (chunk_calls == 1) needs no mainloop hook.
      if (u.chunk_calls <= 1) {
        UlyssesArgs later = u;
        later.defer_slices = 1;
        using K = attention::AttentionKernel<Tr, FusedEpilogue>;
        return attention::launch_attention<K>(p, typename K::Epilogue::Params{RemoteDestination<Element>{later}, p.q_len}, s);
      }
      using K = attention::AttentionKernel<Tr, FusedShapedEpilogue>;
      return attention::launch_attention<K>(p, typename K::Epilogue::Params{RemoteDestination<Element>{u}, p.q_len}, s);
    }
    case EpilogueKind::flagged_local: {
      using K = attention::AttentionKernel<Tr, FlaggedLocalEpilogue>;
      return attention::launch_attention<K>(
          p, typename K::Epilogue::Params{FlaggedLocalDestination<Element>{static_cast<Element*>(p.o), u}, p.q_len}, s);
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace xstage::kernels::ulysses
