// `xstage info`: the node's GPUs, links and NCCL capabilities, as a table or JSON.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "xstage/error.hpp"
#include "xstage/topology.hpp"

namespace xstage::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show GPUs, peer access/NVLink between every pair, and NCCL support");
  auto json = std::make_shared<bool>(false);
  auto out = std::make_shared<std::string>();
  cmd->add_flag("--json", *json, "Print JSON (schema xstage.info.v1) instead of a table");
  cmd->add_option("--out", *out, "Also write the JSON to this file");
  cmd->callback([json, out] {
    Topology t = discover_topology();  // throws "no CUDA GPU visible" without a GPU
    auto j = to_json(t);
    if (*json)
      std::printf("%s\n", j.dump(2).c_str());
    else
      std::printf("%s", format_topology_table(t).c_str());
    if (!out->empty()) {
      FILE* f = std::fopen(out->c_str(), "w");
      if (!f) throw Error("cannot write " + *out);
      std::fprintf(f, "%s\n", j.dump(2).c_str());
      std::fclose(f);
    }
  });
}

}  // namespace xstage::cli
