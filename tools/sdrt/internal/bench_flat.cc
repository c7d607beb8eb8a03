#include "sdrt/tools/sdrt/internal/bench_flat.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sdrt::cli {

absl::StatusOr<std::unique_ptr<FlatType>> FlatType::For(const std::vector<int64_t>& byte_counts,
                                                        const char* what) {
  int64_t total = 0;
  for (int64_t c : byte_counts) total += c;
  if (total <= INT_MAX) return std::unique_ptr<FlatType>(new FlatType(MPI_BYTE, 1));
  int64_t unit = int64_t{1} << 20;
  for (int64_t c : byte_counts) {
    while (unit > 1 && c % unit != 0) unit /= 2;
  }
  if (total / unit > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", total, " bytes in units of ", unit,
                     " bytes are more than MPI's int counts reach in one flat collective"));
  }
  MPI_Datatype type;
  MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &type);
  MPI_Type_commit(&type);
  return std::unique_ptr<FlatType>(new FlatType(type, unit));
}

FlatType::~FlatType() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (unit_ > 1 && !finalized) MPI_Type_free(&type_);
}

absl::StatusOr<std::unique_ptr<FlatAllGather>> FlatAllGather::Create(
    std::vector<int64_t> byte_counts, int rank) {
  auto flat = std::unique_ptr<FlatAllGather>(new FlatAllGather());
  absl::StatusOr<std::unique_ptr<FlatType>> type = FlatType::For(byte_counts, "flat all-gather");
  if (!type.ok()) return type.status();
  flat->type_ = *std::move(type);
  flat->rank_ = rank;
  int64_t at = 0;
  for (int64_t c : byte_counts) {
    flat->counts_.push_back(flat->type_->Count(c));
    flat->displs_.push_back(flat->type_->Count(at));
    flat->equal_ = flat->equal_ && c == byte_counts[0];
    at += c;
  }
  return flat;
}

void FlatAllGather::Run(const uint8_t* send, uint8_t* recv) const {
  MPI_Datatype type = type_->type();
  if (equal_) {
    MPI_Allgather(send, counts_[rank_], type, recv, counts_[rank_], type, MPI_COMM_WORLD);
    return;
  }
  MPI_Request request;
  MPI_Iallgatherv(send, counts_[rank_], type, recv, counts_.data(), displs_.data(), type,
                  MPI_COMM_WORLD, &request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

absl::StatusOr<std::unique_ptr<FlatBroadcast>> FlatBroadcast::Create(int64_t bytes) {
  auto flat = std::unique_ptr<FlatBroadcast>(new FlatBroadcast());
  absl::StatusOr<std::unique_ptr<FlatType>> type = FlatType::For({bytes}, "flat broadcast");
  if (!type.ok()) return type.status();
  flat->type_ = *std::move(type);
  flat->count_ = flat->type_->Count(bytes);
  return flat;
}

void FlatBroadcast::Run(uint8_t* buffer) const {
  MPI_Bcast(buffer, count_, type_->type(), 0, MPI_COMM_WORLD);
}

void FlatAllReduceMax(uint8_t* buffer, int64_t bytes) {
  constexpr int64_t kPiece = int64_t{1} << 30;
  for (int64_t at = 0; at < bytes; at += kPiece) {
    const int count = static_cast<int>(std::min(kPiece, bytes - at));
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, buffer + at, count, MPI_UINT8_T, MPI_MAX, MPI_COMM_WORLD,
                   &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
}

}  // namespace sdrt::cli
