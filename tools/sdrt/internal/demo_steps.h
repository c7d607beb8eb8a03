// The steps of `sdrt demo` (tools/sdrt/demo.cc): its cache folder, its built-in checkpoint,
// and one plan's shard -> gather -> load round trip, the gather and the load run as
// `mpiexec -n N sdrt ... --json` children.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_DEMO_STEPS_H_
#define SDRT_TOOLS_SDRT_INTERNAL_DEMO_STEPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sdrt::cli {

// What the children are run with.
struct DemoSettings {
  int ranks = 4;                 // mpiexec -n
  double bucket_mib = 256;       // --bucket-mib
  double timeout_seconds = 600;  // --timeout
};

// One row of the summary: a step of one plan.
struct DemoRow {
  std::string plan, mesh, step;  // step: "shard", "gather" or "load"
  int64_t bytes = 0;
  double seconds = 0;
  int64_t collectives = 0;
  bool exact = false;
};

// `cache_dir` (--cache-dir) when given, else sdrt's cache folder as scripts/fetch-model.sh
// finds it ($SDRT_CACHE_DIR, else $XDG_CACHE_HOME/sdrt, else $HOME/.cache/sdrt) with demo/.
std::string DemoCacheDir(const std::string& cache_dir);

// mkdir -p `path`; the errno of the first mkdir that fails.
absl::Status MakeDirs(const std::string& path);

// The built-in checkpoint in `cache`: tiny-llama at twice its size (4 layers, hidden 128,
// vocab 512: about 5 MB), float32, seed 0; written once, atomically; its path.
absl::StatusOr<std::string> DefaultCheckpoint(const std::string& cache);

// One plan's shard -> gather -> load of `file`, its files in `work` (this run's own folder),
// on mesh `mesh_text`; a row per step appended to `rows` (a gathered file that differs from
// `file` is reported on stderr and in its row). A child that fails: InvalidArgument when it
// exited with 2 (bad input), else Internal, naming the command and how it ended; the
// errors of opening `file` and of WriteShardedCheckpoint.
absl::Status RunPlan(const DemoSettings& settings, const std::string& file, const std::string& work,
                     const std::string& plan_name, const std::string& mesh_text,
                     std::vector<DemoRow>& rows);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_DEMO_STEPS_H_
