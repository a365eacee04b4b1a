// Summary of the Mega-MoE kernel's per-tile trace (mega_moe_trace.hpp).
#include "ops/mega_moe_trace.hpp"

#include <algorithm>

#include "kernels/moe/mega_args.hpp"

namespace xstage::ops {
namespace km = kernels::moe;

MegaMoeTileStats summarize_mega_trace(const std::vector<uint32_t>& tr, const std::vector<uint64_t>& clk, double ghz) {
  MegaMoeTileStats st;
  constexpr size_t W = km::kMegaClockWords;
  const size_t ctas = clk.size() / W;
  std::vector<double> busy(ctas, 0), first(ctas, -1), last(ctas, 0), l1(ctas, 0), l2(ctas, 0);
  const double us_per_cycle = 1.0 / (ghz * 1e3);
  // The producer's stamps (words 8-10, measurement build only), per CTA in start order.
  struct Stamped {
    double start, end, claim, push, issued;
    bool l1;
  };
  std::vector<std::vector<Stamped>> stamped(ctas);
  for (size_t p = 0; p + km::kMegaTraceWords <= tr.size(); p += km::kMegaTraceWords) {
    const uint32_t tag = tr[p];
    if (tag == 0xffffffffu) continue;
    const size_t c = tag & 0xffffu;
    if (c >= ctas) continue;
    MegaMoeTileKind& k = (tag >> 16) == 1u ? st.l1 : st.l2;
    const double start = tr[p + 1] * us_per_cycle, ml = tr[p + 2] * us_per_cycle, ep = tr[p + 3] * us_per_cycle;
    k.tiles += 1;
    k.mainloop_us += ml;
    k.epilogue_us += ep;
    k.store_tail_us += tr[p + 5] * us_per_cycle;
    k.handover_us += tr[p + 6] * us_per_cycle;
    k.staged_us += tr[p + 7] * us_per_cycle;
    if (tr[p + 4] != 0xffffffffu) k.input_wait_us += tr[p + 4] * us_per_cycle;
    busy[c] += ml + ep;
    ((tag >> 16) == 1u ? l1 : l2)[c] += ml + ep;
    if (first[c] < 0 || start < first[c]) first[c] = start;
    last[c] = std::max(last[c], start + ml + ep);
    if constexpr (km::kMegaTraceWords >= 11) {
      if (tr[p + 8] != 0xffffffffu && tr[p + 9] != 0xffffffffu && tr[p + 10] != 0xffffffffu)
        stamped[c].push_back({start, start + ml + ep, tr[p + 8] * us_per_cycle, tr[p + 9] * us_per_cycle,
                              tr[p + 10] * us_per_cycle, (tag >> 16) == 1u});
    }
  }
  for (std::vector<Stamped>& v : stamped) {
    std::sort(v.begin(), v.end(), [](const Stamped& a, const Stamped& b) { return a.start < b.start; });
    for (size_t j = 1; j < v.size(); ++j) {
      MegaMoeTileKind& k = v[j].l1 ? st.l1 : st.l2;
      const double prev_end = v[j - 1].end;
      k.producer_tiles += 1;
      k.gap_before_us += v[j].start - prev_end;
      k.waited_push_us += std::max(0.0, std::min(v[j].push, v[j].start) - prev_end);
      k.claim_to_push_us += v[j].push - v[j].claim;
      k.claim_late_us += std::max(0.0, v[j].claim - prev_end);
      k.loads_us += v[j].issued - v[j].push;
    }
  }
  for (MegaMoeTileKind* k : {&st.l1, &st.l2})
    if (k->tiles > 0) {
      k->mainloop_us /= double(k->tiles);
      k->epilogue_us /= double(k->tiles);
      k->store_tail_us /= double(k->tiles);
      k->handover_us /= double(k->tiles);
      k->staged_us /= double(k->tiles);
      k->input_wait_us /= double(k->tiles);
      if (k->producer_tiles > 0)
        for (double* v : {&k->gap_before_us, &k->waited_push_us, &k->claim_to_push_us, &k->claim_late_us, &k->loads_us})
          *v /= double(k->producer_tiles);
    }
  // CTA start offsets from the globaltimer pairs (ns), the rest in SM cycles of each CTA.
  uint64_t t0 = ~0ull;
  for (size_t c = 0; c < ctas; ++c)
    if (clk[W * c + 1] != 0) t0 = std::min(t0, clk[W * c + 1]);
  double busy_sum = 0, span_sum = 0;
  std::vector<double> firsts;
  st.last_tile_end_us_min = 1e300;
  MegaMoePhases& ph = st.phases;
  for (size_t c = 0; c < ctas; ++c) {
    const uint64_t* k = &clk[W * c];
    if (k[2] <= k[0]) continue;
    const double span = (k[2] - k[0]) * us_per_cycle;
    busy_sum += busy[c];
    span_sum += span;
    if (first[c] >= 0) firsts.push_back(first[c]);
    const double off = (k[1] - t0) / 1e3;
    st.last_tile_end_us_min = std::min(st.last_tile_end_us_min, off + last[c]);
    st.last_tile_end_us_max = std::max(st.last_tile_end_us_max, off + last[c]);
    // Phases: start | prologue | tiles and gaps | combine wait | reduce | end (the reduce stamp
    // between the last tile's end and the CTA's end, else the CTA is left out).
    const double reduce_at = (k[4] - k[0]) * us_per_cycle;
    if (first[c] < 0 || k[4] < k[0] || reduce_at < last[c] || reduce_at > span) continue;
    ph.prologue_us += first[c];
    ph.l1_us += l1[c];
    ph.l2_us += l2[c];
    ph.gaps_us += (last[c] - first[c]) - busy[c];
    ph.combine_us += reduce_at - last[c];
    ph.reduce_us += span - reduce_at;
    ph.ctas += 1;
  }
  if (ph.ctas > 0)
    for (double* v : {&ph.prologue_us, &ph.l1_us, &ph.l2_us, &ph.gaps_us, &ph.combine_us, &ph.reduce_us})
      *v /= ph.ctas;
  if (st.last_tile_end_us_min > st.last_tile_end_us_max) st.last_tile_end_us_min = st.last_tile_end_us_max;
  st.busy_share = span_sum > 0 ? busy_sum / span_sum : 0;
  if (!firsts.empty()) {
    std::nth_element(firsts.begin(), firsts.begin() + firsts.size() / 2, firsts.end());
    st.first_tile_us = firsts[firsts.size() / 2];
  }
  return st;
}

}  // namespace xstage::ops
