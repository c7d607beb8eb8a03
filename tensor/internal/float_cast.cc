#include "sdrt/tensor/internal/float_cast.h"

#include <algorithm>
#include <cstring>

namespace sdrt::internal {
namespace {

// Elements converted per pass through a float32 block on the stack.
constexpr int64_t kBlock = 1024;

// `n` elements of D at `from` widened into `out`.
template <DType D>
void Widen(const char* from, int64_t n, float* out) {
  using Bits = typename FloatCodec<D>::Bits;
  for (int64_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, from + i * static_cast<int64_t>(sizeof(Bits)), sizeof(b));
    out[i] = FloatCodec<D>::Widen(b);
  }
}

// `n` float32 values narrowed into elements of D at `to`.
template <DType D>
void Narrow(const float* in, int64_t n, char* to) {
  using Bits = typename FloatCodec<D>::Bits;
  for (int64_t i = 0; i < n; ++i) {
    const Bits b = FloatCodec<D>::Narrow(in[i]);
    std::memcpy(to + i * static_cast<int64_t>(sizeof(Bits)), &b, sizeof(b));
  }
}

}  // namespace

bool ConvertFloats(const void* from, DType from_dtype, void* to, DType to_dtype, int64_t count) {
  if (CastKindOf(from_dtype) != CastKind::kFloat || CastKindOf(to_dtype) != CastKind::kFloat) {
    return false;
  }
  const char* in = static_cast<const char*>(from);
  char* out = static_cast<char*>(to);
  if (from_dtype == to_dtype) {
    std::memcpy(out, in, static_cast<size_t>(count) * (ElementBits(from_dtype) / 8));
    return true;
  }
  const int64_t in_bytes = ElementBits(from_dtype) / 8, out_bytes = ElementBits(to_dtype) / 8;
  float block[kBlock];
  for (int64_t done = 0; done < count; done += kBlock) {
    const int64_t n = std::min(kBlock, count - done);
    VisitFloatDType(from_dtype, false, [&](auto d) {
      Widen<decltype(d)::value>(in + done * in_bytes, n, block);
      return true;
    });
    VisitFloatDType(to_dtype, false, [&](auto d) {
      Narrow<decltype(d)::value>(block, n, out + done * out_bytes);
      return true;
    });
  }
  return true;
}

}  // namespace sdrt::internal
