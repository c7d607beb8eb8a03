// `sdrt load --read auto|all|root`: which ranks read the checkpoint. `root`: rank 0 maps it
// and BroadcastStateDict sends the pieces; `all`: every rank opens it and LoadStateDict
// preads its own pieces; `auto`: `all` when every rank sees the same files, else `root`.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_READ_MODE_H_
#define SDRT_TOOLS_SDRT_INTERNAL_READ_MODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"

namespace sdrt::cli {

struct ReadChoice {
  bool all = false;    // every rank reads its own bytes
  std::string reason;  // why, for the summary line ("every rank sees the same files")
};

// Collective over `world` (one AllGatherBytes for `auto`; none otherwise). `requested` is
// "auto", "all" or "root" (InvalidArgument otherwise, before any collective; the caller
// agrees on it). For `auto`, every rank describes SRC's files as it sees them (the
// source's layout, each file's name, size, mtime and an xxh64 of its header bytes: the
// 8-byte length and the JSON header, at most 100 MiB) or the reason it cannot open them;
// `all` when every description is rank 0's, else `root`, naming the first rank that
// differs. The same for CPU and CUDA shards: LoadStateDict stages either through its
// buffers (pinned for a GPU).
absl::StatusOr<ReadChoice> ChooseRead(Communicator& world, const std::string& src,
                                      const std::string& requested);

// Every rank's value of `mine`, in rank order (one AllGatherBytes).
absl::StatusOr<std::vector<int64_t>> AllGatherInt64(Communicator& world, int64_t mine);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_READ_MODE_H_
