#include "sdrt/core/distributed/internal/engine/reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
// comm's float16/bfloat16 conversions, the ones its MPI reductions use, so that a Partial
// reduced here rounds exactly as an all-reduce does (core may include comm).
#include "sdrt/tensor/internal/float_cast.h"

namespace sdrt::internal {
namespace {

template <typename T>
T Combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    // In uint64_t, which wraps instead of overflowing; truncated back to T.
    const uint64_t x = static_cast<std::make_unsigned_t<T>>(a);
    const uint64_t y = static_cast<std::make_unsigned_t<T>>(b);
    if (op == ReduceOp::kSum) return static_cast<T>(x + y);
    if (op == ReduceOp::kProduct) return static_cast<T>(x * y);
  } else {
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return a + b;
    if (op == ReduceOp::kProduct) return a * b;
  }
  return op == ReduceOp::kMin ? std::min(a, b) : std::max(a, b);
}

template <typename T>
void CombineAll(void* acc, const void* in, int64_t n, ReduceOp op) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (int64_t i = 0; i < n; ++i) a[i] = Combine(a[i], b[i], op);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void CombineHalves(void* acc, const void* in, int64_t n, ReduceOp op) {
  uint16_t* a = static_cast<uint16_t*>(acc);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < n; ++i) a[i] = FromFloat(Combine(ToFloat(a[i]), ToFloat(b[i]), op));
}

void CombineBools(void* acc, const void* in, int64_t n, ReduceOp op) {
  uint8_t* a = static_cast<uint8_t*>(acc);
  const uint8_t* b = static_cast<const uint8_t*>(in);
  const bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
  for (int64_t i = 0; i < n; ++i) a[i] = any ? (a[i] | b[i]) : (a[i] & b[i]);
}

template <typename T>
void DivideAll(void* acc, int64_t n, int64_t divisor) {
  T* a = static_cast<T*>(acc);
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] / d;
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void DivideHalves(void* acc, int64_t n, int64_t divisor) {
  uint16_t* a = static_cast<uint16_t*>(acc);
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0; i < n; ++i) a[i] = FromFloat(ToFloat(a[i]) / d);
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 || dtype == DType::kFloat32 ||
         dtype == DType::kFloat64;
}

}  // namespace

bool CanReduce(DType dtype, ReduceOp op) {
  return op == ReduceOp::kAvg ? IsFloating(dtype) : IsReducible(dtype);
}

absl::Status ReduceInto(const Tensor& acc, const Tensor& in, ReduceOp op) {
  if (!CanReduce(acc.dtype(), op) || acc.dtype() != in.dtype() || acc.numel() != in.numel() ||
      !acc.is_contiguous() || !in.is_contiguous() || !acc.device().is_cpu() ||
      !in.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reduce (", ReduceOpName(op), ") ",
                                                   in.ToString(), " into ", acc.ToString()));
  }
  void* a = acc.data_ptr();
  const void* b = in.data_ptr();
  const int64_t n = acc.numel();
  switch (acc.dtype()) {
    case DType::kBool:
      CombineBools(a, b, n, op);
      break;
    case DType::kUInt8:
      CombineAll<uint8_t>(a, b, n, op);
      break;
    case DType::kInt8:
      CombineAll<int8_t>(a, b, n, op);
      break;
    case DType::kInt16:
      CombineAll<int16_t>(a, b, n, op);
      break;
    case DType::kInt32:
      CombineAll<int32_t>(a, b, n, op);
      break;
    case DType::kInt64:
      CombineAll<int64_t>(a, b, n, op);
      break;
    case DType::kFloat16:
      CombineHalves<Float16ToFloat, FloatToFloat16>(a, b, n, op);
      break;
    case DType::kBFloat16:
      CombineHalves<BFloat16ToFloat, FloatToBFloat16>(a, b, n, op);
      break;
    case DType::kFloat32:
      CombineAll<float>(a, b, n, op);
      break;
    default:
      CombineAll<double>(a, b, n, op);
      break;
  }
  return absl::OkStatus();
}

absl::Status DivideBy(const Tensor& acc, int64_t divisor) {
  if (!IsFloating(acc.dtype()) || divisor < 1 || !acc.is_contiguous() || !acc.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot divide ", acc.ToString(), " by ", divisor));
  }
  void* a = acc.data_ptr();
  const int64_t n = acc.numel();
  switch (acc.dtype()) {
    case DType::kFloat16:
      DivideHalves<Float16ToFloat, FloatToFloat16>(a, n, divisor);
      break;
    case DType::kBFloat16:
      DivideHalves<BFloat16ToFloat, FloatToBFloat16>(a, n, divisor);
      break;
    case DType::kFloat32:
      DivideAll<float>(a, n, divisor);
      break;
    default:
      DivideAll<double>(a, n, divisor);
      break;
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
