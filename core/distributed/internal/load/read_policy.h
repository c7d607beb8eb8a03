// Which read LoadStateDict runs (core/distributed/load_state_dict.h): kAuto's rule (every
// rank sees the same files: kAll, else kRoot) and the check that every rank takes the same
// path for a sharded folder. The ranks exchange DescribeSource's text in the agreement
// that opens the call; DecideRead then gives the same answer on every rank. And how many
// threads of a rank read (ResolveReaders). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_POLICY_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/load_options.h"

namespace sdrt::internal {

// This rank's view of its source: the kind's name (CheckpointKindName) and, when
// `fingerprint` and the source is a full checkpoint, 16 hex digits of an xxh64 over each
// file's size, modification time (stat of its path, to the nanosecond) and header bytes
// (the 8-byte length and the JSON header that the source's safetensors reader parsed,
// hashed from its mapping; the file names are left out: only what the bytes are matters).
// "cannot open it (<why>)" when `source` is null (`open_status` says why), "cannot read it
// (<why>)" when a file cannot be stat'ed. The description of one state of the files is
// the same on every rank that sees them.
std::string DescribeSource(const CheckpointSource* source, const absl::Status& open_status,
                           bool fingerprint);

struct ReadDecision {
  ReadMode read = ReadMode::kAll;  // kAll or kRoot
  bool sharded = false;            // the rank-file path of a sharded folder (read kAll)
  std::string reason;              // LoadStats::read_reason
};

// The read of a call collective over `descriptions.size()` ranks, from every rank's
// DescribeSource in rank order and the mode they requested:
//   - rank 0's source is an sdrt sharded folder: the rank-file path ("an sdrt sharded
//     folder: rank files, resharded") unless `requested` is kRoot (InvalidArgument: every
//     rank reads its own rank files);
//   - kAll and kRoot: as requested ("requested");
//   - kAuto: kAll when every rank's description is rank 0's ("auto: every rank sees the
//     same files"), else kRoot, naming the first rank that differs ("auto: rank 0 cannot
//     open it (<why>)", "auto: rank 2 sees other files than rank 0", "auto: rank 1 cannot
//     read it (<why>)").
// InvalidArgument, when the rank-file path or kAll is taken, for a rank that opened a
// source of the other family (a sharded folder beside full checkpoints), naming it. A
// rank that could not open its source is no error here: the path that needs it fails
// with its open error.
absl::StatusOr<ReadDecision> DecideRead(ReadMode requested,
                                        const std::vector<std::string>& descriptions);

// The most reader threads LoadOptions::readers 0 chooses.
inline constexpr int kMaxAutomaticReaders = 4;

// LoadOptions::readers for one call: `readers` when it is > 0; else 1 into CPU locals (a
// rank's copying keeps up with one thread there, and the ranks of a node share its cores),
// and into device locals (`device`) half of `cpus`, at least 1 and at most
// kMaxAutomaticReaders (the reads feed pinned buffers that one stream empties).
int ResolveReaders(int readers, bool device, int cpus);

// The CPUs this process may run on: its affinity mask's count (sched_getaffinity: what a
// launcher that binds ranks leaves each one), else std::thread::hardware_concurrency, at
// least 1.
int AffinityCpus();

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_POLICY_H_
