// `sdrt load DIR --mesh M --plan P` where DIR is an sdrt sharded folder (sdrt shard): the
// folder's pieces, written by W ranks in one layout, go into the N ranks of --mesh in
// another, peer to peer (LoadStateDict of the folder: a reshard): rank p reads only the
// rank files f with f mod N == p (its own when N >= W), nothing else, and receives only the
// bytes of its pieces it does not hold. With N >= W the sources are the folder's DTensors on its
// own mesh; with fewer ranks than the folder they are ShardedTensors whose boxes are the folder's
// pieces (a folder whose pieces are not boxes, _StridedShard cut into several runs, then needs
// mpiexec -n W or more: InvalidArgument). Every rank's result is checked: against --verify INDIR's
// rank files, or else by gathering every tensor to rank 0 and comparing its xxh64 with the folder's
// index.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_LOAD_SHARDED_H_
#define SDRT_TOOLS_SDRT_INTERNAL_LOAD_SHARDED_H_

#include <cstdint>
#include <string>

#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {

struct ShardedLoadArgs {
  std::string dir;
  std::string mesh;
  std::string plan;
  std::string verify_dir;
  ReadMode read = ReadMode::kAuto;  // kRoot is refused (no full file to broadcast)
  int64_t bucket_mib = 256;
  bool direct_io = false;  // refused (the rank files are mapped)
  bool json = false;
};

// Runs the load on every rank of `session` (collective); returns the exit code: 0, 2 for
// bad input (arguments, the folder, a mismatch against --verify), 1 for a runtime failure
// (a mismatch against the folder's own hashes, a backend's error).
int LoadShardedFolder(const ShardedLoadArgs& args, Session& session);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_LOAD_SHARDED_H_
