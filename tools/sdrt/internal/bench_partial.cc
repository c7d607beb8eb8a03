// BenchRunner::GatherPartial (bench_ops.h): GatherStateDict of Partial DTensors, whose
// all-reduces GatherStateDict buckets (core/distributed/internal/partial_buckets.h),
// against one flat all-reduce of the same bytes.
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_flat.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

// The signed integer dtype of `dtype`'s element size; InvalidArgument for sizes no
// integer has (the sub-byte dtypes).
absl::StatusOr<DType> IntegerOfSize(DType dtype) {
  switch (ElementBits(dtype)) {
    case 8:
      return DType::kInt8;
    case 16:
      return DType::kInt16;
    case 32:
      return DType::kInt32;
    case 64:
      return DType::kInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "sdrt bench: gather_partial needs whole-byte elements of 1, 2, 4 or 8 bytes; ",
          DTypeName(dtype), " has ", ElementBits(dtype), " bits"));
  }
}

}  // namespace

absl::StatusOr<BenchRow> BenchRunner::GatherPartial() {
  BenchRow row = NewRow("gather_partial", -1);
  // Every rank holds every tensor whole as a DTensor [Partial(max)]: a view of the full
  // tensor's bytes as signed integers of its element size, so that the maximum of the
  // ranks' equal values is the same bytes whatever the dtype (floating NaNs included).
  Map partial;
  partial.Reserve(workload_.full.size());
  absl::Status ready;
  for (size_t i = 0; i < workload_.full.size() && ready.ok(); ++i) {
    const Tensor& full = workload_.full[i];
    absl::StatusOr<DType> as = IntegerOfSize(full.dtype());
    if (!as.ok()) {
      ready = as.status();
      break;
    }
    absl::StatusOr<Tensor> local = Tensor::FromStorage(full.storage(), *as, full.shape(),
                                                       full.strides(), full.storage_offset());
    absl::StatusOr<DTensor> d =
        local.ok() ? DTensor::Make(*std::move(local), mesh_, {Placement::Partial(ReduceOp::kMax)},
                                   full.shape())
                   : absl::StatusOr<DTensor>(local.status());
    if (d.ok()) partial.Set(workload_.names[i], Value(*std::move(d)));
    ready.Update(d.status());
  }
  // The flat all-reduce's buffer: every tensor's bytes, back to back.
  const int64_t total = workload_.bytes;
  absl::StatusOr<Tensor> buffer = Tensor::Empty({total}, DType::kUInt8);
  ready.Update(buffer.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  uint8_t* const flat = static_cast<uint8_t*>(buffer->data_ptr());
  const auto fill = [&](uint8_t* out) {
    for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
      const int64_t b = workload_.full[i].nbytes();
      if (b > 0) std::memcpy(out + at, Bytes(i), static_cast<size_t>(b));
      at += static_cast<size_t>(b);
    }
  };
  fill(flat);

  std::optional<Map> result;
  GatherOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  options.stats = &row.stats;
  FreshBuffer fresh;
  BenchCalls calls;
  calls.prepare = [&] { result.reset(); };
  calls.sdrt = [&]() -> absl::Status {
    absl::StatusOr<Map> gathered = GatherStateDict(partial, options);
    if (!gathered.ok()) return gathered.status();
    result = *std::move(gathered);
    return absl::OkStatus();
  };
  calls.flat = [&] { FlatAllReduceMax(flat, total); };
  calls.fresh = [&]() -> absl::Status {
    // New tensors hold the result: the bytes copied into fresh memory, reduced there.
    fresh = AllocateFresh(total);
    if (fresh == nullptr) {
      FlatAllReduceMax(flat, total);
      return absl::ResourceExhaustedError(
          absl::StrCat("sdrt bench: no memory for a fresh buffer of ", total, " bytes"));
    }
    fill(fresh.get());
    FlatAllReduceMax(fresh.get(), total);
    return absl::OkStatus();
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));

  int64_t wrong = 0;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Value* v = result->Find(workload_.names[i]);
    wrong += v != nullptr && v->kind() == ValueKind::kTensor
                 ? WrongBytes(v->as_tensor(), i, /*whole=*/true)
                 : workload_.full[i].nbytes();
  }
  row.wrong = SumOverRanks(wrong);
  int64_t flat_wrong = 0;
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    const int64_t b = workload_.full[i].nbytes();
    if (b > 0 && std::memcmp(flat + at, Bytes(i), static_cast<size_t>(b)) != 0) {
      for (int64_t k = 0; k < b; ++k) flat_wrong += flat[at + k] != Bytes(i)[k];
    }
    at += static_cast<size_t>(b);
  }
  row.flat_wrong = SumOverRanks(flat_wrong);
  return row;
}

}  // namespace sdrt::cli
