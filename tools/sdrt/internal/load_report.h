// What `sdrt load` (tools/sdrt/load.cc) prints: the summary (text or JSON, docs/CLI.md)
// and its verdict on the check of every rank's pieces.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_LOAD_REPORT_H_
#define SDRT_TOOLS_SDRT_INTERNAL_LOAD_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tools/sdrt/internal/load_setup.h"
#include "sdrt/tools/sdrt/internal/runner.h"

namespace sdrt::cli {

// One load's figures, the same on every rank.
struct LoadFacts {
  std::string src;
  std::string mesh;  // --mesh as given
  std::string plan;  // the plan's name
  std::string device;
  std::string read;  // --read as given
  bool options_read_once_per_node = false;  // --read-once-per-node
  bool options_map_results = false;         // --map-results
  int options_readers = 0;                  // --readers (0: not given, or chosen)
  double bucket_mib = 0;
  int ranks = 0;
  const SourceOutline* outline = nullptr;
  LoadStats stats;  // this rank's (the read and its reason, the transfer's figures)
  double seconds = 0;
  std::vector<int64_t> bytes_read;  // per rank
  std::vector<int64_t> bytes_kept;  // per rank
  std::vector<int64_t> bytes_from_node;  // per rank: received from its node's readers
  std::vector<int64_t> node;             // per rank (LoadStats::node)
  std::vector<int64_t> bytes_mapped;     // per rank: pieces mapped, not read
  // What the pieces were checked against, and the names that differ per rank (comma
  // separated; "" for none). `gathered`: the check of every tensor gathered to rank 0 (a
  // sharded SRC, or one read by the root, without --verify), which names tensors rather than
  // pieces.
  std::string verify_dir;
  bool gathered = false;
  // The check of a sharded SRC under a parallel layout description: each rank's tensors
  // loaded whole again and held to the folder's index (LoadCheck::whole_on_each_rank).
  bool whole_on_each_rank = false;
  std::vector<std::string> wrong;
  // Why the pieces were not checked ("": they were).
  std::string unchecked;
  // The engine's tensors, when --map or --cast made SRC's into others; -1: SRC's own.
  int64_t engine_tensors = -1;
};

// The summary. Its verdict, when a piece differs: InvalidArgument (exit 2) when the pieces
// differ from --verify INDIR or from a sharded folder's own index (the checkpoints hold
// other bytes than they say: bad input, as gather's hash check), Internal (exit 1) when
// they differ from this sdrt's own slicing of SRC (a runtime failure); the message counts
// them and names the first.
Report LoadReport(const LoadFacts& facts);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_LOAD_REPORT_H_
