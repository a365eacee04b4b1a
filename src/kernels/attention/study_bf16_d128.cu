// Tile-shape study (built only with -DXSTAGE_ATTN_STUDY=ON; nothing here ships): bf16,
// d = 128, non-causal variants of the attention kernel that differ from the shipped one in
// one or two things each, so tools/attn_study can time them against each other in one run.
// wgmma N = 176 exists only among CUTLASS's "extended" SM90 shapes; without this the
// selector falls back to n16 atoms (11x the instructions).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#include "kernels/attention/direct_epilogue.cuh"
#include "kernels/attention/kernel.cuh"
#include "kernels/attention/study.hpp"

namespace xstage::kernels::attention {
namespace {

using E = cutlass::bfloat16_t;
// kQ: Q buffers, the shipped tile's for the 128-key variants; the 176-key one has room for one.
template <int kBlockN, int kLazy, int kQ = kLocalQStages>
using Tr = AttentionTraits<E, 128, 128, kBlockN, 2, false, kLazy, kQ>;

using Shipped = ShippedKernel<E, 128, false>;  // staged 128 x 128, lazy rescale 2
using Eager = AttentionKernel<Tr<128, 0>, LocalStoreEpilogue>;
using Lazy1 = AttentionKernel<Tr<128, 1>, LocalStoreEpilogue>;
using LongKv = LongKvKernel<E>;  // 128 x 192, registers -> global
using Direct176 = AttentionKernel<Tr<176, 2, 1>, DirectStoreEpilogue>;
// Key groups (docs/attention.md §Key groups): the shipped tile (64 keys per block, four K/V stages),
// and 128 keys per block with the two stages that fit next to the exchange buffer.
using KeyGroups64x4 = KeyGroupsKernel<E, 128, false>;
using KeyGroups128 = AttentionKernel<AttentionTraits<E, 128, 64, 128, 2, false, 2, 2, 2>, LocalStoreEpilogue>;
// The staged 128-row tile with 64-key blocks in four stages (the same K/V bytes as two 128-key ones):
// what a last-round key-group variant would need for two blocks in flight per group.
using Staged64x4 = AttentionKernel<AttentionTraits<E, 128, 128, 64, 4, false, 2, kLocalQStages>, LocalStoreEpilogue>;

template <class K>
StudyVariant variant(const char* name) {
  return StudyVariant{name, K::info(), [](AttentionParams const& p, cudaStream_t s) { return launch_attention<K>(p, s); }};
}

}  // namespace

std::vector<StudyVariant> attention_study_variants() {
  return {variant<Eager>("staged-eager-128x128"), variant<Lazy1>("staged-lazy1-128x128"),
          variant<Shipped>("shipped-staged-128x128"), variant<LongKv>("shipped-longkv-128x192"),
          variant<Direct176>("direct-lazy2-128x176"), variant<KeyGroups128>("keygroups-64x128-s2"),
          variant<KeyGroups64x4>("shipped-keygroups-64x64-s4"), variant<Staged64x4>("staged-128x64-s4")};
}

}  // namespace xstage::kernels::attention
