def sub(p, old, new, count=1):
    s=open(p).read()
    assert s.count(old)==count, (p, old[:70], s.count(old))
    s=s.replace(old,new); open(p,'w').write(s)
R='/work/main/'
# --- mainloop: the deferred store between the first QK^T's issue and its wait
p=R+'src/kernels/attention/mainloop.cuh'
sub(p,'''  template <bool kHasHook = true, bool kSplit = false, class SmemQ, class SmemK, class SmemVt, class FrgO, int kRows, class StepHook>
  __device__ void mma(Params const& mp, Pipeline const& pk, Pipeline const& pv, uint64_t const& q_full,
                      uint32_t q_phase, QPipeline const& pq, QState q_read, State& read, WorkTile const& tile, int ct, SmemQ const& sQ, SmemK const& sK,
                      SmemVt const& sVt, FrgO& tOrO, OnlineSoftmax<kRows, T::kSoftmaxWays>& softmax, float (&lse)[kRows],
                      float* pin_slot, StepHook&& step_hook, int hook_calls = 0) const {''','''  //
  // kDeferredStore: tOrO arrives holding the previous tile's O; store_prev() (the previous
  // tile's epilogue) runs while this tile's first QK^T GEMM is in flight, then O is cleared
  // (docs/attention.md §Epilogue policy "Deferred store"). Needs the tile's Q loaded before the
  // previous tile ends (two Q buffers).
  template <bool kHasHook = true, bool kSplit = false, bool kDeferredStore = false, class SmemQ, class SmemK, class SmemVt,
            class FrgO, int kRows, class StepHook, class StorePrev>
  __device__ void mma(Params const& mp, Pipeline const& pk, Pipeline const& pv, uint64_t const& q_full,
                      uint32_t q_phase, QPipeline const& pq, QState q_read, State& read, WorkTile const& tile, int ct, SmemQ const& sQ, SmemK const& sK,
                      SmemVt const& sVt, FrgO& tOrO, OnlineSoftmax<kRows, T::kSoftmaxWays>& softmax, float (&lse)[kRows],
                      float* pin_slot, StepHook&& step_hook, StorePrev&& store_prev, int hook_calls = 0) const {
    static_assert(!kDeferredStore || kQStages == 2, "a deferred store waits for the next tile's Q");''')
sub(p,'''    if constexpr (kHasHook) step_hook(0, n_blocks == 1);
    clear(tOrO);''','''    if constexpr (kHasHook) step_hook(0, n_blocks == 1);
    if constexpr (!kDeferredStore) clear(tOrO);''')
sub(p,'''    // First block (the key tail / causal diagonal): masked, rows may be fully masked.
    pk.consumer_wait(read);
    wgmma_tile<true, 0>(mma_qk, tSrQ, tSrK(_, _, _, read.index), tSrS);
    pk.consumer_release(read);''','''    // First block (the key tail / causal diagonal): masked, rows may be fully masked.
    pk.consumer_wait(read);
    if constexpr (kDeferredStore) {
      wgmma_tile<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, read.index), tSrS);
      store_prev();  // reads tOrO only; the GEMM in flight writes tSrS
      clear(tOrO);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
    } else {
      wgmma_tile<true, 0>(mma_qk, tSrQ, tSrK(_, _, _, read.index), tSrS);
    }
    pk.consumer_release(read);''')
# --- kernel: O and the LSE of the previous tile live across the tile boundary
p=R+'src/kernels/attention/kernel.cuh'
sub(p,'''template <class Traits, template <class> class EpiloguePolicy>
struct AttentionKernel {''','''// An epilogue policy that may store a tile while the next tile's first GEMM runs (kDeferredStore).
template <class E>
concept DefersStore = requires { requires E::kDeferredStore; };

template <class Traits, template <class> class EpiloguePolicy>
struct AttentionKernel {''')
sub(p,'''  static constexpr int kRows = 2;  // accumulator rows per consumer thread (checked in the softmax)''','''  static constexpr int kRows = 2;  // accumulator rows per consumer thread (checked in the softmax)
  // The previous tile's store runs in the next tile's mainloop (docs/attention.md §Epilogue
  // policy "Deferred store"): only with two Q buffers, so the next tile's Q is already there.
  static constexpr bool kDeferredStore = DefersStore<Epilogue> && T::kQStages == 2;''')
old='''      for (int idx = sched.first(); sched.valid(idx); idx = sched.next(idx)) {
        const WorkTile tile = sched.decode(idx);
        Tensor tOrO = partition_fragment_C(typename T::TiledMmaPV{}, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});
        OnlineSoftmax<kRows, T::kSoftmaxWays> softmax(params.mainloop.scale_log2);
        float lse[kRows];'''
new='''      // Deferred store: O stays in these registers from one tile's end to the next tile's
      // first GEMM, with the tile and LSE it belongs to.
      Tensor tOrO_kept = partition_fragment_C(typename T::TiledMmaPV{}, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});
      float lse_kept[kRows];
      WorkTile tile_kept{};
      bool kept = false;
      for (int idx = sched.first(); sched.valid(idx); idx = sched.next(idx)) {
        const WorkTile tile = sched.decode(idx);
        Tensor tOrO_own = partition_fragment_C(typename T::TiledMmaPV{}, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});
        auto& tOrO = [&]() -> auto& {
          if constexpr (kDeferredStore) return tOrO_kept; else return tOrO_own;
        }();
        OnlineSoftmax<kRows, T::kSoftmaxWays> softmax(params.mainloop.scale_log2);
        float lse[kRows];
        auto store_prev = [&] {
          if constexpr (kDeferredStore)
            if (kept) epilogue.store(params.epilogue, ss.o.data(), tOrO, lse_kept, tile_kept);
        };'''
sub(p,old,new)
old='''        mainloop.template mma<Epilogue::kHasStepHook, Epilogue::kTailSplit>(params.mainloop, pk, pv, ss.q_full, q_phase, pq, q_read,
                                                      read, tile, ct, sQ, sK, sVt, tOrO, softmax, lse, &ss.pin[ct],
                                                      step_hook, hook_calls);
        q_phase ^= 1u;
        q_read.advance();
        // Split kernels decode the tile again (fewer values live across the mainloop); the
        // others keep the tile, as their hot loop was tuned with it.
        if constexpr (Epilogue::kTailSplit)
          epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, sched.decode(idx));
        else
          epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, tile);
        // After the CTA's last tile: whatever the policy still holds leaves now.
        if (!sched.valid(sched.next(idx))) epilogue.finish(params.epilogue, ss.o.data());'''
new='''        mainloop.template mma<Epilogue::kHasStepHook, Epilogue::kTailSplit, kDeferredStore>(
            params.mainloop, pk, pv, ss.q_full, q_phase, pq, q_read, read, tile, ct, sQ, sK, sVt, tOrO, softmax, lse,
            &ss.pin[ct], step_hook, store_prev, hook_calls);
        q_phase ^= 1u;
        q_read.advance();
        const bool last = !sched.valid(sched.next(idx));
        if constexpr (kDeferredStore) {
          // The CTA's last tile stores now (inside the loop: code after it made ptxas
          // serialise the wgmma, §Epilogue policy); the others keep O for the next tile.
          if (last) {
            epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, tile);
          } else {
            for (int i = 0; i < kRows; ++i) lse_kept[i] = lse[i];
            tile_kept = tile;
            kept = true;
          }
        } else if constexpr (Epilogue::kTailSplit) {
          // Split kernels decode the tile again (fewer values live across the mainloop); the
          // others keep the tile, as their hot loop was tuned with it.
          epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, sched.decode(idx));
        } else {
          epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, tile);
        }
        // After the CTA's last tile: whatever the policy still holds leaves now.
        if (last) epilogue.finish(params.epilogue, ss.o.data());'''
sub(p,old,new)
# --- the local store defers
p=R+'src/kernels/attention/epilogue.cuh'
sub(p,'''  static constexpr bool kTailSplit = false;  // whole tiles only (tile_scheduler.cuh)
  static_assert(!(kSwizzled && kHasServiceThread), "the handshake words live in the padding");''','''  static constexpr bool kTailSplit = false;  // whole tiles only (tile_scheduler.cuh)
  static_assert(!(kSwizzled && kHasServiceThread), "the handshake words live in the padding");
  // The kernel may hand a tile's O over while the next tile's first GEMM runs (its Q buffers
  // permitting): the local store, whose stores need no ordering against other tiles'.
  static constexpr bool kDeferredStore = std::is_same_v<Destination, LocalDestination<Element>>;''')
