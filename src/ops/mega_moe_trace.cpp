// Summary of the Mega-MoE kernel's per-tile trace (mega_moe_trace.hpp).
#include "ops/mega_moe_trace.hpp"

#include <algorithm>

#include "kernels/moe/mega_args.hpp"

namespace xstage::ops {
namespace km = kernels::moe;

MegaMoeTileStats summarize_mega_trace(const std::vector<uint32_t>& tr, const std::vector<uint64_t>& clk, double ghz) {
  MegaMoeTileStats st;
  const size_t ctas = clk.size() / 4;
  std::vector<double> busy(ctas, 0), first(ctas, -1), last(ctas, 0);
  const double us_per_cycle = 1.0 / (ghz * 1e3);
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
    if (first[c] < 0 || start < first[c]) first[c] = start;
    last[c] = std::max(last[c], start + ml + ep);
  }
  for (MegaMoeTileKind* k : {&st.l1, &st.l2})
    if (k->tiles > 0) {
      k->mainloop_us /= double(k->tiles);
      k->epilogue_us /= double(k->tiles);
      k->store_tail_us /= double(k->tiles);
      k->handover_us /= double(k->tiles);
      k->staged_us /= double(k->tiles);
      k->input_wait_us /= double(k->tiles);
    }
  // CTA start offsets from the globaltimer pairs (ns), the rest in SM cycles of each CTA.
  uint64_t t0 = ~0ull;
  for (size_t c = 0; c < ctas; ++c)
    if (clk[4 * c + 1] != 0) t0 = std::min(t0, clk[4 * c + 1]);
  double busy_sum = 0, span_sum = 0;
  std::vector<double> firsts;
  st.last_tile_end_us_min = 1e300;
  for (size_t c = 0; c < ctas; ++c) {
    if (clk[4 * c + 2] <= clk[4 * c]) continue;
    busy_sum += busy[c];
    span_sum += (clk[4 * c + 2] - clk[4 * c]) * us_per_cycle;
    if (first[c] >= 0) firsts.push_back(first[c]);
    const double off = (clk[4 * c + 1] - t0) / 1e3;
    st.last_tile_end_us_min = std::min(st.last_tile_end_us_min, off + last[c]);
    st.last_tile_end_us_max = std::max(st.last_tile_end_us_max, off + last[c]);
  }
  if (st.last_tile_end_us_min > st.last_tile_end_us_max) st.last_tile_end_us_min = st.last_tile_end_us_max;
  st.busy_share = span_sum > 0 ? busy_sum / span_sum : 0;
  if (!firsts.empty()) {
    std::nth_element(firsts.begin(), firsts.begin() + firsts.size() / 2, firsts.end());
    st.first_tile_us = firsts[firsts.size() / 2];
  }
  return st;
}

}  // namespace xstage::ops
