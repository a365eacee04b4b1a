// Each subcommand of `xstage` registers itself on the root app; its callback does the work.
// Callbacks throw xstage::InvalidArgument for bad input (exit 2) and xstage::Error for
// failures (exit 1); main() turns both into one line on stderr.
#pragma once
#include <CLI/CLI.hpp>

namespace xstage::cli {

// The `bench` group every benchmark command hangs under (created by the first that asks).
inline CLI::App* bench_group(CLI::App& app) {
  auto found = app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; });
  if (!found.empty()) return found.front();
  auto* b = app.add_subcommand("bench", "Benchmarks of xstage's kernels (tables, JSON)");
  b->require_subcommand(1);
  return b;
}
void add_info_command(CLI::App& app);
void add_probe_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_moe_routing_command(CLI::App& app);  // `xstage moe-routing`
#ifdef XSTAGE_HAVE_ATTENTION
void add_attention_bench_command(CLI::App& app);  // `xstage bench attention`
#endif
#ifdef XSTAGE_HAVE_ULYSSES
void add_ulysses_bench_command(CLI::App& app);  // `xstage bench ulysses`
#endif
#ifdef XSTAGE_HAVE_MOE
void add_moe_gemm_bench_command(CLI::App& app);   // `xstage bench moe-gemm`
void add_moe_bench_command(CLI::App& app);  // `xstage bench moe` (alias moe-layer)
#endif
}  // namespace xstage::cli
