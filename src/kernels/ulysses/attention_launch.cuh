// The Ulysses attention kernels: the shipped attention mainloop (non-causal; DiT attention)
// with a Ulysses epilogue. Included by the attention_<dtype>_d<dim>.cu files, one per
// translation unit so they compile in parallel. d = 128 also has the long-key tile (128 x 192,
// registers -> destination: DirectStoreEpilogueTo) for fused and comm-sm (docs/ulysses.md
// "Long-key tile").
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
template <class Traits>
using FusedDirectEpilogue = attention::DirectStoreEpilogueTo<Traits, RemoteDestination<typename Traits::Element>>;
template <class Traits>
using FlaggedLocalDirectEpilogue =
    attention::DirectStoreEpilogueTo<Traits, FlaggedLocalDestination<typename Traits::Element>>;

// One launch with a remote-row epilogue (fused; defer_slices: UlyssesArgs, shaped_epilogue.cuh)
// or the local flagged one (comm-sm), for tile traits Tr and epilogue policy Ep.
template <class Tr, template <class> class Ep>
cudaError_t launch_remote(const attention::AttentionParams& p, const UlyssesArgs& u, int defer_slices, cudaStream_t s) {
  using Element = typename Tr::Element;
  UlyssesArgs a = u;
  a.defer_slices = defer_slices;
  using K = attention::AttentionKernel<Tr, Ep>;
  return attention::launch_attention<K>(p, typename K::Epilogue::Params{RemoteDestination<Element>{a}, p.q_len}, s);
}
template <class Tr, template <class> class Ep>
cudaError_t launch_flagged(const attention::AttentionParams& p, const UlyssesArgs& u, cudaStream_t s) {
  using Element = typename Tr::Element;
  using K = attention::AttentionKernel<Tr, Ep>;
  return attention::launch_attention<K>(
      p, typename K::Epilogue::Params{FlaggedLocalDestination<Element>{static_cast<Element*>(p.o), u}, p.q_len}, s);
}

// The long-key tile for fused (each slice's rows to their owners from registers) and comm-sm.
// Its 64-row slices are numbered as the staged tile's (same block_m and warp groups), so the
// Ulysses arguments, flags and counters are the same.
template <class Element>
cudaError_t launch_ulysses_long_kv(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                                   cudaStream_t s) {
  constexpr attention::TileConfig c = attention::long_kv_tile_config();
  static_assert(c.block_m == attention::tile_config(128).block_m &&
                    c.consumer_warpgroups == attention::tile_config(128).consumer_warpgroups,
                "the slice numbering (UlyssesArgs::block_m, consumer_wgs) is the staged tile's");
  using Tr = attention::AttentionTraits<Element, 128, c.block_m, c.block_n, c.stages, /*causal=*/false, c.lazy_rescale>;
  if (p.causal || p.head_dim != 128) return cudaErrorInvalidValue;
  if (kind == EpilogueKind::fused) return launch_remote<Tr, FusedDirectEpilogue>(p, u, 0, s);
  if (kind == EpilogueKind::flagged_local) return launch_flagged<Tr, FlaggedLocalDirectEpilogue>(p, u, s);
  return cudaErrorInvalidValue;  // fused-shaped needs a staged slice (shaped_epilogue.cuh)
}

template <class Element, int kHeadDim>
cudaError_t launch_ulysses_attention(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                                     bool long_kv, cudaStream_t s) {
  if constexpr (kHeadDim == 128) {
    if (long_kv) return launch_ulysses_long_kv<Element>(kind, p, u, s);
  } else {
    if (long_kv) return cudaErrorInvalidValue;  // the long-key tile is d = 128 only
  }
  constexpr attention::TileConfig c = attention::tile_config(kHeadDim);
  using Tr = attention::AttentionTraits<Element, kHeadDim, c.block_m, c.block_n, c.stages, /*causal=*/false,
                                         c.lazy_rescale>;
  if (p.causal) return cudaErrorInvalidValue;
  switch (kind) {
    case EpilogueKind::fused:
      return launch_remote<Tr, FusedEpilogue>(p, u, 0, s);
    case EpilogueKind::fused_shaped:
      // A plan of one chunk per slice (chunk_calls == 1) needs no mainloop hook.
      if (u.chunk_calls <= 1) return launch_remote<Tr, FusedEpilogue>(p, u, 1, s);
      return launch_remote<Tr, FusedShapedEpilogue>(p, u, u.defer_slices, s);
    case EpilogueKind::flagged_local:
      return launch_flagged<Tr, FlaggedLocalEpilogue>(p, u, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace xstage::kernels::ulysses
