// The flat baselines of `sdrt bench`: one MPI collective over MPI_COMM_WORLD of all the
// bytes in one buffer, the physical floor of the operation on the machine
// (docs/PERFORMANCE.md). Raw MPI, not sdrt's communicator, so that the floor owes nothing
// to sdrt.
//
// The all-gather avoids MPICH's blocking MPI_Allgatherv: MPICH 4.0 pipelines it around a
// ring in 32 KiB pieces, and with more ranks than cores every piece waits for a scheduler
// tick (64 MiB over 4 ranks on 2 cores: 12 s against 32 ms; the 4-rank llama run did not
// finish in 300 s). Equal counts use MPI_Allgather, unequal ones MPI_Iallgatherv +
// MPI_Wait, which takes no such pipeline (bench/RESULTS.md, "Nonblocking MPI collectives
// under a deadline"); the MPI communicator does the same. No MPIR_CVAR_* variable is needed.
//
// Counts are in bytes (MPI_BYTE) up to 2 GiB in all; past that in a contiguous datatype of
// the largest power of two (at most 1 MiB) dividing every count, so that they fit MPI's int.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_FLAT_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_FLAT_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace sdrt::cli {

// MPI_BYTE, or MPI_Type_contiguous of `unit` bytes, committed and freed with the object.
class FlatType {
 public:
  // The unit for buffers of these byte counts, and the type. InvalidArgument (naming
  // `what`) when a count or the sum does not fit an int in that unit.
  static absl::StatusOr<std::unique_ptr<FlatType>> For(const std::vector<int64_t>& byte_counts,
                                                       const char* what);
  ~FlatType();
  FlatType(const FlatType&) = delete;
  FlatType& operator=(const FlatType&) = delete;

  MPI_Datatype type() const { return type_; }
  int64_t unit() const { return unit_; }
  int Count(int64_t bytes) const { return static_cast<int>(bytes / unit_); }

 private:
  FlatType(MPI_Datatype type, int64_t unit) : type_(type), unit_(unit) {}
  MPI_Datatype type_;
  int64_t unit_;
};

// Rank q's `byte_counts[q]` bytes, concatenated in rank order on every rank.
class FlatAllGather {
 public:
  // InvalidArgument when the counts do not fit MPI's int (FlatType::For).
  static absl::StatusOr<std::unique_ptr<FlatAllGather>> Create(std::vector<int64_t> byte_counts,
                                                               int rank);
  // Collective: this rank's bytes from `send` into `recv` (sum of the counts) at its offset.
  void Run(const uint8_t* send, uint8_t* recv) const;

 private:
  FlatAllGather() = default;
  std::unique_ptr<FlatType> type_;
  std::vector<int> counts_;  // in units
  std::vector<int> displs_;  // in units
  int rank_ = 0;
  bool equal_ = true;
};

// `bytes` bytes from rank 0's buffer into every rank's.
class FlatBroadcast {
 public:
  static absl::StatusOr<std::unique_ptr<FlatBroadcast>> Create(int64_t bytes);
  void Run(uint8_t* buffer) const;  // collective

 private:
  FlatBroadcast() = default;
  std::unique_ptr<FlatType> type_;
  int count_ = 0;
};

// The element-wise maximum of every rank's `bytes` bytes, in place on every rank, as
// unsigned bytes (the max of equal values is the same bytes, whatever they encode): the
// floor of all-reducing a state dict's Partial tensors. MPI_Iallreduce + MPI_Wait, as the
// MPI communicator does, in pieces of at most 1 GiB (MPI's int counts).
void FlatAllReduceMax(uint8_t* buffer, int64_t bytes);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_FLAT_H_
