// The vocabulary of LoadStateDict (core/distributed/load_state_dict.h): who reads
// (ReadMode), its options, what it reports (LoadStats) and returns (LoadResult), shared by
// the verb and its internal paths (internal/load/).
#ifndef SDRT_CORE_DISTRIBUTED_LOAD_OPTIONS_H_
#define SDRT_CORE_DISTRIBUTED_LOAD_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/export.h"
#include "sdrt/tensor/device.h"

namespace sdrt SDRT_API {

// Who reads a full checkpoint (load_state_dict.h).
enum class ReadMode { kAuto, kAll, kRoot };

// "auto", "all", "root".
absl::string_view ReadModeName(ReadMode mode);

// What one rank's LoadStateDict read and kept.
struct LoadStats {
  // kAll: the bytes pread returned (kept bytes plus gaps read through); kRoot: the whole
  // checkpoint on the root, 0 elsewhere; a sharded folder: the bytes of the pieces in the
  // rank files this rank read.
  int64_t bytes_read = 0;
  // The bytes of this rank's pieces (local tensors filled): kAll counts them as read, in the
  // checkpoint's dtype (before a cast or FP8 quantization), the others as filled.
  int64_t bytes_kept = 0;
  int64_t preads = 0;      // kAll: pread calls (a read interrupted or cut short takes several)
  int64_t reads = 0;       // kAll: planned reads; a sharded folder: rank files read
  // kAll: the most staging bytes allocated at once: at most staging_buffers x
  // staging_bytes, less when the largest read is smaller than a buffer.
  int64_t peak_staging_bytes = 0;
  // kAll, in seconds: from the call's start until the first read can start (matching the
  // header, the agreements, planning, new locals allocated, a CUDA load's stream made), and
  // allocating the staging buffers (for CUDA locals pinned ones, cudaHostAlloc: about 0 when
  // the process's kept buffers serve them, load_state_dict.h). What is left of the call is
  // reading, copying and the closing agreement.
  double plan_seconds = 0;
  double staging_seconds = 0;
  // The read that ran, the same on every rank: kAll (also for a sharded folder) or kRoot;
  // and why: "requested", "auto: every rank sees the same files", "auto: rank 2 sees other
  // files than rank 0", "auto: rank 1 cannot open it (<why>)", "auto: no communicator",
  // "an sdrt sharded folder: rank files, resharded", with "; ..." notes appended (options
  // that did not apply, a root mapping copied from pageable memory).
  ReadMode read = ReadMode::kAll;
  std::string read_reason;
  // kRoot and a sharded folder: the transfer's figures (BroadcastStateDict's, or the
  // reshard's from the rank files; transfer_stats.h).
  TransferStats transfer;
  // kAll with LoadOptions::share_reads: the bytes of this rank's pieces that another rank
  // of its node read and sent it (counted there in bytes_read, not here), and its node
  // (0, 1, ... in the order of the nodes' first ranks).
  int64_t bytes_from_node = 0;
  int node = 0;
  // kAll with LoadOptions::map_results: the bytes of this rank's pieces that are views of
  // the file's mapping (in bytes_kept, not in bytes_read).
  int64_t bytes_mapped = 0;
  // bytes_read / the bytes kept that were read (bytes_kept - bytes_mapped); 1 when none were.
  double read_amplification() const {
    const int64_t read_kept = bytes_kept - bytes_mapped;
    return read_kept <= 0 ? 1.0 : static_cast<double>(bytes_read) / read_kept;
  }
};

struct LoadOptions {
  // When not null, collective over `comm`: the ranks agree before and after reading
  // (load_state_dict.h), and the DTensors' meshes must span exactly its ranks. nullptr: no
  // communication (kAll only); `rank` is required.
  Communicator* comm = nullptr;
  // Who reads (load_state_dict.h); every rank passes the same.
  ReadMode read = ReadMode::kAuto;
  // This process's rank in the DTensors' meshes and the ShardedTensors' placements.
  // -1: comm->rank(); with kRoot or a sharded folder it must be comm->rank().
  int rank = -1;
  // Remove from `local` every leaf the checkpoint lacks (reported in missing_keys either way).
  bool strict = false;
  // Where new tensors go: fresh locals of meta DTensors and full tensors that replace
  // plain leaves (CPU or one CUDA device; preallocated locals stay where they are). A
  // sharded folder fills CPU tensors only.
  Device device = Device::CPU();
  // kAll's staging pool: this many buffers (>= 1) of this many bytes (>= 4096; the longest
  // read). With two or more, one thread reads into one buffer while the calling thread
  // copies out of another (pinned buffers when the locals are on a CUDA device).
  int staging_buffers = 2;
  int64_t staging_bytes = int64_t{256} << 20;
  // kAll: reader threads (1 to 64) preading at the same time, each into a staging buffer of
  // its own (then at least readers + 1 buffers) or straight into the locals, the calling
  // thread copying out in file order. More than one pays where one thread cannot keep up
  // with the storage (or the page cache) and cores are free: one rank per node, or a GPU
  // fed from pinned buffers. 0 (the default): chosen per call (AutomaticReaders): 1 into
  // CPU locals; into CUDA locals half the CPUs this process may run on (its affinity mask,
  // which launchers narrow per rank), at least 1 and at most 4.
  int readers = 0;
  // kAll: read with O_DIRECT (the page cache bypassed: for checkpoints on cold storage that
  // would only evict what the page cache holds); reads are widened to whole 4096-byte
  // blocks and LoadStats::bytes_read counts the widening. Default: through the page cache.
  // Refused with kRoot and for a sharded folder (mapped); unused when kAuto picks kRoot.
  bool direct_io = false;
  // kAll: the largest gap read through (>= 0; load_state_dict.h).
  int64_t max_gap_bytes = int64_t{1} << 20;
  // kAll: a tensor several ranks of a node keep alike (a full tensor, or a DTensor local
  // that is the same on them: tp's replicated tensors, a data-parallel replica's pieces,
  // hsdp's replica groups) is read from storage by one of them and sent to the others (the
  // transfer engine over a communicator of the node's ranks), so each node reads the
  // distinct bytes its ranks keep once. Locals fresh or preallocated, on the communicator's
  // device type (CPU with MPI; CUDA with NCCL, not yet run on GPUs), every rank's on one
  // type; ShardedTensor shards are read by each rank. Needs `rank` to be comm->rank() on
  // every rank (else the agreement fails). Costs one exchange of host names (without
  // node_of_rank) and, with several nodes, a Split per call. false (the default): every rank
  // reads all its own bytes, which from the page cache is faster. Every rank passes the
  // same.
  bool share_reads = false;
  // kAll: a fresh CPU local (of a meta DTensor, or a tensor replacing a plain leaf) whose
  // bytes are one range of its file in the checkpoint's dtype at an address aligned to its
  // element (a whole tensor, a Shard(0) piece) is not read but becomes a view of a private
  // (copy-on-write) mapping of the file, its page tables set up in the call (Linux >= 5.14,
  // MADV_POPULATE_READ; without it, or where mmap lacks memory, the pieces are read and
  // LoadStats::read_reason says why). No copy and no new memory: the ranks of a host share
  // the page cache's pages until one writes a page, which becomes its own. Other pieces
  // (Shard(1), a cast, a Partial local, preallocated locals, CUDA) are read as usual. What
  // the caller takes on, as with torch.load(mmap=True): the file must stay as it is while
  // the tensors live. A writer that replaces the file (writing a new one and renaming it
  // over, as sdrt and safetensors do) is safe once the load is done (before, the load
  // fails with DataLoss: not the file the source opened); one that cuts it short in place makes a
  // later touch of a mapped tensor fault (SIGBUS), and one that rewrites it in place
  // changes the pages not yet written. InvalidArgument with direct_io or share_reads;
  // unused (noted in read_reason) when the read is kRoot or the source a sharded folder.
  // Each rank decides alone (no agreement needed).
  bool map_results = false;
  // Which ranks of comm share a node, for share_reads: empty, ranks with the same host name
  // (one exchange of names per call); else one entry per rank, equal values sharing a
  // node (InvalidArgument for another length).
  std::vector<int64_t> node_of_rank;
  // The most bytes of one collective bucket: kRoot's broadcast (BroadcastOptions::
  // bucket_bytes) and a sharded folder's reshard (ReshardOptions::bucket_bytes: the peak
  // extra memory per rank is three such buckets: ReshardOptions). >= 64.
  int64_t bucket_bytes = int64_t{256} << 20;
  // How the checkpoint's tensors make `local`'s (weight_map.h): renamed, fused, split,
  // padded, each rank reading only the bytes of its own pieces into views of its locals.
  // Empty (the default): leaves are matched by path. Every rank passes the same map
  // (compared in the agreement); each rank lowers its leaves from the checkpoint's tensor
  // list (with kRoot the one rank 0 sends, and no cast between float dtypes). FP8
  // destinations with scales (weight_map.h) are read into staging of the checkpoint's
  // dtype and quantized by each rank, with or without a map; a per-tensor scale needs
  // `comm` (InvalidArgument without one).
  WeightMap weight_map;
  LoadStats* stats = nullptr;  // filled when not null
  // Called on the calling thread with this rank's bytes so far and in all, e.g. to show
  // progress: kAll after each read is copied out (LoadStats::bytes_read units), kRoot and a
  // sharded folder after each exchange (bytes sent and received). May be empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

struct LoadResult {
  // Paths of `local` leaves that the checkpoint lacks, in `local`'s order.
  std::vector<std::string> missing_keys;
  // Checkpoint tensors that `local` lacks, in the source's order (CheckpointSource::tensors()).
  std::vector<std::string> unexpected_keys;
};

}  // namespace SDRT_API

#endif  // SDRT_CORE_DISTRIBUTED_LOAD_OPTIONS_H_
