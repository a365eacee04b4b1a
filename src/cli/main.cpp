#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "xstage/error.hpp"

int main(int argc, char** argv) {
  // Virtual ranks run one stream per rank (plus side streams): give each its own hardware
  // queue, so no kernel queues behind another rank's waiting kernel (docs/virtual-ranks.md).
  // Kernels load at context creation: a lazily loaded kernel's first launch can wait behind
  // another rank's waiting kernel on the same GPU.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  CLI::App app{
      "xstage: measure, model and use the X-Stage (the in-flight stage of remote stores)\n"
      "of multi-GPU nodes. Run `xstage <command> --help` for each command."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  xstage::cli::add_info_command(app);
  xstage::cli::add_probe_command(app);
  xstage::cli::add_fit_command(app);
  xstage::cli::add_predict_command(app);
  xstage::cli::add_moe_routing_command(app);
#ifdef XSTAGE_HAVE_ATTENTION
  xstage::cli::add_attention_bench_command(app);
#endif
#ifdef XSTAGE_HAVE_MOE
  xstage::cli::add_moe_gemm_bench_command(app);
  xstage::cli::add_moe_bench_command(app);
#endif
#ifdef XSTAGE_HAVE_ULYSSES
  xstage::cli::add_ulysses_bench_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --help-all print and exit 0; any other flag error is bad input: one line, exit 2.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "xstage: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const xstage::InvalidArgument& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 2;
  } catch (const xstage::Error& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xstage: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
