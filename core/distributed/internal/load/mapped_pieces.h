// LoadOptions::map_results (internal/load/load_all.cc): fresh CPU pieces whose bytes are one
// range of their file become views of a private, copy-on-write mapping of that file instead
// of being read. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_MAPPED_PIECES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_MAPPED_PIECES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// The mappings of one LoadStateDict call, one per file of its source, made when a piece of
// the file is first mapped. Each is the whole file, MAP_PRIVATE with PROT_READ|PROT_WRITE:
// a tensor made from it reads the page cache's pages (shared with every process mapping
// the file) until it is written, when the written page becomes its own. The storages live
// as long as a tensor holds them.
class MappedPieces {
 public:
  explicit MappedPieces(const CheckpointSource& source);

  // When `dest` (a meta tensor for a fresh CPU local, of `entry`'s dtype and the shape of
  // the piece `runs`) is one contiguous range of its file (the read plan makes it one
  // segment: a whole tensor, a Shard(0) piece) at an offset aligned to its element, makes
  // it a view of the file's mapping and returns true; else false and `dest` is unchanged
  // (the piece is read; a misaligned one counted for not_mapped()). Errors: PlanReads' for
  // runs outside the tensor, the file cannot be opened (its errno's code) or is no longer
  // the one the source opened (CheckSameFile's DataLoss), mmap fails (its errno's).
  // A kernel without MADV_POPULATE_READ (Linux < 5.14, or a sandbox refusing it) turns
  // mapping off for the call, and a file mmap refuses for want of memory (ENOMEM) is not
  // mapped: false, not_mapped() says why.
  absl::StatusOr<bool> TryMap(const CheckpointSourceTensor& entry, const ShardRuns& runs,
                              Tensor& dest);

  // Sets up the page tables of every mapped range now (MADV_POPULATE_READ), so that the
  // first touch of a mapped tensor does not fault, and a file cut short (or unreadable)
  // since it was mapped fails here (DataLoss naming it) instead of faulting later.
  absl::Status Populate();

  int64_t bytes() const { return bytes_; }  // the bytes of the pieces mapped
  // Why pieces that could have been mapped were read instead ("": none were): mapping off
  // or refused, and how many pieces sat at a file offset misaligned for their dtype.
  std::string not_mapped() const;

 private:
  // Maps file f (once) into maps_[f]; false when the kernel lacks MADV_POPULATE_READ
  // (then unavailable_ is set and nothing is mapped) or mmap lacks memory (refused_[f]).
  absl::StatusOr<bool> MapFile(size_t f);
  // MADV_POPULATE_READ of [begin, end) of file f's mapping (page-aligned first).
  absl::Status PopulateRange(size_t f, int64_t begin, int64_t end);

  const CheckpointSource& source_;
  std::vector<std::shared_ptr<Storage>> maps_;  // per file of source_; null until used
  std::vector<bool> refused_;                    // per file: mmap said ENOMEM
  // Per file, the [begin, end) byte ranges mapped, in the order they were mapped.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges_;
  std::vector<Segment> segments_;  // TryMap's scratch
  int64_t bytes_ = 0;
  bool unavailable_ = false;
  std::string not_mapped_;
  int64_t unaligned_ = 0;        // pieces not mapped for their offset's alignment
  std::string first_unaligned_;  // the first of them
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_MAPPED_PIECES_H_
