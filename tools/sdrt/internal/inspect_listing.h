// The listings of `sdrt inspect` (tools/sdrt/inspect.cc), one per kind of checkpoint: what
// it holds, as a table or, with `json`, as JSON (docs/CLI.md), printed on stdout.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_INSPECT_LISTING_H_
#define SDRT_TOOLS_SDRT_INTERNAL_INSPECT_LISTING_H_

#include <string>

#include "absl/status/status.h"

namespace sdrt::cli {

// A sharded checkpoint folder: its mesh, plan, metadata, each tensor's placements and local
// shape per rank, each rank file's bytes. ReadShardedCheckpointIndex's errors, as bad input
// (InputError).
absl::Status InspectShardedCheckpoint(const std::string& path, bool json);

// A Hugging Face folder or a folder of safetensors files (validated: its index and every
// file's header): the tensors with the file of each, then one row per file.
// CheckpointSource::Open's errors, as bad input (InputError).
absl::Status InspectFolderSource(const std::string& path, bool json);

// One safetensors file: its tensors, totals and metadata; a header-only description of `sdrt
// make --header-only` too, saying "header only" ("header_only": true in JSON) and that the
// bytes are described, not held. SafetensorsFile::Open's errors, as bad input (InputError).
absl::Status InspectSafetensorsFile(const std::string& path, bool json);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_INSPECT_LISTING_H_
