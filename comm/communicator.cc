#include "sdrt/comm/communicator.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// True when the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool Overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto a_begin = reinterpret_cast<uintptr_t>(a);
  const auto b_begin = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

}  // namespace

std::string Communicator::Where(absl::string_view op) const {
  return absl::StrCat(op, " (", backend(), ", rank ", rank_, " of ", size_, ")");
}

absl::Status Communicator::CheckTensor(absl::string_view op, absl::string_view what,
                                       const Tensor& t) const {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(op), ": ", what, " is undefined"));
  }
  if (t.device() != device() && !(t.device().is_cpu() && StagesCpuTensors())) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(op), ": ", what, " ", t.ToString(), " is on ", t.device().ToString(),
                     ", the ", backend(), " backend needs ", device().ToString(), " tensors"));
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(op), ": ", what, " ", t.ToString(), " is not contiguous"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckRoot(absl::string_view op, int root) const {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(op), ": root ", root, " is not in [0, ", size_, ")"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::AllGather(Tensor& output, const Tensor& input) {
  constexpr absl::string_view kOp = "all_gather";
  SDRT_RETURN_IF_ERROR(CheckTensor(kOp, "input", input));
  SDRT_RETURN_IF_ERROR(CheckTensor(kOp, "output", output));
  if (output.dtype() != input.dtype() || output.numel() != size_ * input.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kOp), ": output ", output.ToString(), " must hold ", size_, " * ",
                     input.numel(), " = ", size_ * input.numel(),
                     " elements of the input's dtype (input ", input.ToString(), ")"));
  }
  if (input.numel() == 0) return absl::OkStatus();
  const int64_t bytes_per_rank = input.nbytes();
  const void* my_slot = static_cast<const char*>(output.data_ptr()) + rank_ * bytes_per_rank;
  if (input.data_ptr() != my_slot &&
      Overlaps(input.data_ptr(), bytes_per_rank, output.data_ptr(), output.nbytes())) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kOp), ": input overlaps output without being output's slice ", rank_));
  }
  return DoAllGather(output.data_ptr(), input.data_ptr(), bytes_per_rank);
}

absl::Status Communicator::AllGatherV(Tensor& output, const Tensor& input,
                                      absl::Span<const int64_t> counts) {
  constexpr absl::string_view kOp = "all_gather_v";
  SDRT_RETURN_IF_ERROR(CheckTensor(kOp, "input", input));
  SDRT_RETURN_IF_ERROR(CheckTensor(kOp, "output", output));
  if (static_cast<int64_t>(counts.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kOp), ": ", counts.size(), " counts for ", size_, " ranks"));
  }
  int64_t total = 0;
  int64_t my_offset = 0;
  for (int i = 0; i < size_; ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(kOp), ": counts[", i, "] = ", counts[i], " is negative"));
    }
    if (i == rank_) my_offset = total;
    total += counts[i];
  }
  if (counts[rank_] != input.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kOp), ": counts[", rank_, "] = ", counts[rank_], " but the input ",
                     input.ToString(), " has ", input.numel(), " elements"));
  }
  if (output.dtype() != input.dtype() || output.numel() != total) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kOp), ": output ", output.ToString(), " must hold sum(counts) = ", total,
                     " elements of the input's dtype ", DTypeName(input.dtype()), " (counts [",
                     absl::StrJoin(counts, ", "), "])"));
  }
  if (total == 0) return absl::OkStatus();
  // Byte counts; a sub-byte count must be whole bytes (BytesForElements).
  std::vector<int64_t> byte_counts(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    absl::StatusOr<int64_t> bytes = BytesForElements(input.dtype(), counts[i]);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(kOp), ": counts[", i, "]: ", bytes.status().message()));
    }
    byte_counts[i] = *bytes;
  }
  SDRT_ASSIGN_OR_RETURN(const int64_t my_byte_offset, BytesForElements(input.dtype(), my_offset));
  const void* my_slot = static_cast<const char*>(output.data_ptr()) + my_byte_offset;
  if (input.data_ptr() != my_slot &&
      Overlaps(input.data_ptr(), input.nbytes(), output.data_ptr(), output.nbytes())) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(kOp), ": input overlaps output without being output's slice ", rank_));
  }
  return DoAllGatherV(output.data_ptr(), input.data_ptr(), byte_counts);
}

absl::Status Communicator::Broadcast(absl::Span<Tensor> tensors, int root) {
  constexpr absl::string_view kOp = "broadcast";
  SDRT_RETURN_IF_ERROR(CheckRoot(kOp, root));
  std::vector<Tensor> non_empty;
  std::vector<size_t> index;  // of non_empty's tensors in `tensors`
  for (size_t i = 0; i < tensors.size(); ++i) {
    SDRT_RETURN_IF_ERROR(CheckTensor(kOp, absl::StrCat("tensors[", i, "]"), tensors[i]));
    if (tensors[i].numel() == 0) continue;
    non_empty.push_back(tensors[i]);
    index.push_back(i);
  }
  if (non_empty.empty()) return absl::OkStatus();
  // Overlaps: by address, each tensor against the one before it (n log n, not n^2: a
  // grouped broadcast may carry tens of thousands of tensors).
  std::vector<size_t> by_address(non_empty.size());
  for (size_t k = 0; k < by_address.size(); ++k) by_address[k] = k;
  const auto address = [&](size_t k) {
    return reinterpret_cast<uintptr_t>(non_empty[k].data_ptr());
  };
  std::sort(by_address.begin(), by_address.end(),
            [&](size_t a, size_t b) { return address(a) < address(b); });
  for (size_t k = 1; k < by_address.size(); ++k) {
    const Tensor& before = non_empty[by_address[k - 1]];
    const Tensor& t = non_empty[by_address[k]];
    if (Overlaps(before.data_ptr(), before.nbytes(), t.data_ptr(), t.nbytes())) {
      const size_t i = std::max(index[by_address[k - 1]], index[by_address[k]]);
      return absl::InvalidArgumentError(absl::StrCat(
          Where(kOp), ": tensors[", i, "] ", tensors[i].ToString(), " overlaps another tensor"));
    }
  }
  return DoBroadcast(non_empty, root);
}

absl::Status Communicator::AllReduce(Tensor& tensor, ReduceOp op) {
  constexpr absl::string_view kOp = "all_reduce";
  SDRT_RETURN_IF_ERROR(CheckTensor(kOp, "tensor", tensor));
  const DType dtype = tensor.dtype();
  const ReduceKind kind = ReduceKindOf(dtype);
  if (kind == ReduceKind::kNone || (kind == ReduceKind::kBool && op == ReduceOp::kAvg)) {
    return absl::InvalidArgumentError(absl::StrCat(Where(kOp), ": reduce op ", ReduceOpName(op),
                                                   " is not supported for ", DTypeName(dtype)));
  }
  if (tensor.numel() == 0) return absl::OkStatus();
  return DoAllReduce(tensor, op);
}

absl::Status Communicator::BroadcastBytes(std::string* bytes, int root) {
  constexpr absl::string_view kOp = "broadcast_bytes";
  if (bytes == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Where(kOp), ": bytes is null"));
  }
  SDRT_RETURN_IF_ERROR(CheckRoot(kOp, root));
  return DoBroadcastBytes(bytes, root);
}

absl::StatusOr<std::vector<std::string>> Communicator::AllGatherBytes(const std::string& mine) {
  return DoAllGatherBytes(mine);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  absl::StatusOr<std::unique_ptr<Communicator>> split = DoSplit(color, key);
  if (split.ok() && *split != nullptr) (*split)->set_timeout(timeout_);
  return split;
}

absl::Status Communicator::Barrier() { return DoBarrier(); }

absl::Status Communicator::Synchronize() { return DoSynchronize(); }

absl::Status Communicator::Exchange(absl::Span<const SendMessage> sends,
                                    absl::Span<const ReceiveMessage> receives,
                                    const LocalWork& overlap) {
  constexpr absl::string_view kOp = "exchange";
  const auto check = [&](absl::string_view what, size_t i, int peer, const void* data,
                         int64_t bytes) -> absl::Status {
    if (peer >= 0 && peer < size() && bytes >= 0 && (data != nullptr || bytes == 0)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(Where(kOp), ": ", what, "[", i, "] to peer ",
                                                   peer, " of ", bytes, " bytes at ",
                                                   data == nullptr ? "null" : "a buffer"));
  };
  std::vector<int64_t> to_self;
  for (size_t i = 0; i < sends.size(); ++i) {
    SDRT_RETURN_IF_ERROR(check("sends", i, sends[i].peer, sends[i].data, sends[i].bytes));
    if (sends[i].peer == rank()) to_self.push_back(sends[i].bytes);
  }
  size_t from_self = 0;
  for (size_t i = 0; i < receives.size(); ++i) {
    SDRT_RETURN_IF_ERROR(
        check("receives", i, receives[i].peer, receives[i].data, receives[i].bytes));
    if (receives[i].peer != rank()) continue;
    if (from_self >= to_self.size() || to_self[from_self] != receives[i].bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(kOp), ": receive from self ", from_self, " of ", receives[i].bytes,
          " bytes has no send to self of that size (", to_self.size(), " sends to self)"));
    }
    ++from_self;
  }
  if (from_self != to_self.size()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(kOp), ": ", to_self.size(),
                                                   " sends to self but ", from_self,
                                                   " receives from self"));
  }
  return DoExchange(sends, receives, overlap);
}

absl::Status Communicator::DoExchange(absl::Span<const SendMessage> /*sends*/,
                                      absl::Span<const ReceiveMessage> /*receives*/,
                                      const LocalWork& /*overlap*/) {
  return absl::UnimplementedError(
      absl::StrCat(Where("exchange"), ": the ", backend(), " backend has no point-to-point"));
}

absl::Status Communicator::CheckBytesLength(absl::string_view op, int from, int64_t length) const {
  if (length >= 0 && length <= kMaxBytesMessage) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(Where(op), ": rank ", from,
                                                 " sent a bytes message of length ", length,
                                                 " (the limit is ", kMaxBytesMessage, ")"));
}

absl::StatusOr<std::vector<std::string>> Communicator::AllGatherBytesVia(
    const std::string& mine,
    const std::function<absl::Status(void*, const void*, absl::Span<const int64_t>)>& gather_host) {
  const int64_t my_length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(size());
  const std::vector<int64_t> length_bytes(size(), sizeof(int64_t));
  SDRT_RETURN_IF_ERROR(gather_host(lengths.data(), &my_length, length_bytes));
  int64_t total = 0;
  for (int q = 0; q < size(); ++q) {
    SDRT_RETURN_IF_ERROR(CheckBytesLength("all_gather_bytes", q, lengths[q]));
    total += lengths[q];  // at most size() * 2^30: no overflow
  }
  if (total > kMaxBytesGathered) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where("all_gather_bytes"), ": the ranks' messages hold ", total,
                     " bytes in all, above the limit of ", kMaxBytesGathered));
  }
  std::string all(total, '\0');
  if (total > 0) {
    SDRT_RETURN_IF_ERROR(gather_host(all.data(), mine.data(), lengths));
  }
  std::vector<std::string> result;
  result.reserve(size());
  int64_t offset = 0;
  for (int64_t length : lengths) {
    result.push_back(all.substr(offset, length));
    offset += length;
  }
  return result;
}

}  // namespace sdrt
