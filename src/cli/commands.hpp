// Each subcommand of `xstage` registers itself on the root app; its callback does the work.
// Callbacks throw xstage::InvalidArgument for bad input (exit 2) and xstage::Error for
// failures (exit 1); main() turns both into one line on stderr.
#pragma once
#include <CLI/CLI.hpp>

namespace xstage::cli {
void add_info_command(CLI::App& app);
void add_probe_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_predict_command(CLI::App& app);
#ifdef XSTAGE_HAVE_ATTENTION
void add_attention_bench_command(CLI::App& app);  // `xstage bench attention`
#endif
}  // namespace xstage::cli
