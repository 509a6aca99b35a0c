// MK_GPU=none: the sync bench exists so tools link everywhere, and says why it cannot run.
#include "device/measure/sync_bench.h"
#include "runtime/error.h"

namespace mk {

std::vector<std::pair<std::string, std::string>> sync_bench_methods() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* name :
       {"flat_counter", "flat_counter_p2", "flat_counter_p4", "flat_gen", "hier_tree", "hier_bcast", "striped",
        "cg_grid_sync", "diag_relaxed_poll", "diag_no_fence", "handoff", "diag_handoff_no_fence"})
    out.emplace_back(name, "");
  return out;
}

SyncBenchReport run_sync_bench(const SyncBenchOptions&, const SyncGroupTable&) {
  fail(
      "sync bench: this binary was built without GPU support (MK_GPU=none); configure with -DMK_GPU=nvidia or "
      "-DMK_GPU=amd");
}

const char* sync_bench_platform() { return "none"; }

}  // namespace mk
