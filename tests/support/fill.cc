#include "sdrt/tests/support/fill.h"

#include "gtest/gtest.h"
#include "sdrt/tensor/internal/float_cast.h"

namespace sdrt::test {

namespace {

// The bytes of a sub-byte tensor, which has no addressable elements: byte k holds
// (k + salt) mod 256, so every element is distinct from its neighbours.
Tensor SubByteBytes(IntSpan shape, DType dtype, int64_t salt) {
  Tensor t = *Tensor::Empty(shape, dtype);
  for (int64_t k = 0; k < t.nbytes(); ++k) t.data<uint8_t>()[k] = static_cast<uint8_t>(k + salt);
  return t;
}

}  // namespace

Tensor Arange(IntSpan shape, DType dtype, int64_t start) {
  if (IsSubByte(dtype)) return SubByteBytes(shape, dtype, start);
  Tensor t = *Tensor::Empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = start + i;
    switch (dtype) {
      case DType::kBool:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(v % 2 != 0);
        break;
      case DType::kUInt8:
      case DType::kInt8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
        break;
      case DType::kFloat8E4M3FN:
      case DType::kFloat8E5M2:
      case DType::kFloat8E4M3FNUZ:
      case DType::kFloat8E5M2FNUZ:
      case DType::kFloat8E8M0FNU:
        t.data<uint8_t>()[i] = static_cast<uint8_t>((v % 127 + 127) % 127);
        break;
      case DType::kUInt16:
        t.data<uint16_t>()[i] = static_cast<uint16_t>(v);
        break;
      case DType::kUInt32:
        t.data<uint32_t>()[i] = static_cast<uint32_t>(v);
        break;
      case DType::kUInt64:
        t.data<uint64_t>()[i] = static_cast<uint64_t>(v);
        break;
      case DType::kComplex64:
        t.data<float>()[2 * i] = static_cast<float>(v);
        t.data<float>()[2 * i + 1] = 0.0f;
        break;
      case DType::kFloat6E2M3FN:
      case DType::kFloat6E3M2FN:
      case DType::kFloat4E2M1FNx2:
        break;  // SubByteBytes above
      case DType::kInt16:
        t.data<int16_t>()[i] = static_cast<int16_t>(v);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = v;
        break;
      case DType::kFloat16:
        t.data<uint16_t>()[i] = internal::FloatToFloat16(static_cast<float>(v));
        break;
      case DType::kBFloat16:
        t.data<uint16_t>()[i] = internal::FloatToBFloat16(static_cast<float>(v));
        break;
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        t.data<double>()[i] = static_cast<double>(v);
        break;
    }
  }
  return t;
}

Tensor ValuePattern(IntSpan shape, DType dtype, int64_t salt) {
  if (IsSubByte(dtype)) return SubByteBytes(shape, dtype, 3 * salt);
  Tensor t = *Tensor::Empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t k = 3 * i + salt;
    switch (dtype) {
      case DType::kBool:
        t.data<uint8_t>()[i] = (i + salt) % 3 == 0 ? 1 : 0;
        break;
      case DType::kUInt8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(7 * k);
        break;
      case DType::kInt8:
        t.data<int8_t>()[i] = static_cast<int8_t>(k % 256 - 128);
        break;
      case DType::kFloat8E4M3FN:
      case DType::kFloat8E5M2:
      case DType::kFloat8E4M3FNUZ:
      case DType::kFloat8E5M2FNUZ:
      case DType::kFloat8E8M0FNU:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(1 + k % 120);
        break;
      case DType::kUInt16:
        t.data<uint16_t>()[i] = static_cast<uint16_t>(k * 31);
        break;
      case DType::kUInt32:
        t.data<uint32_t>()[i] = static_cast<uint32_t>(k * 2654435761u);
        break;
      case DType::kUInt64:
        t.data<uint64_t>()[i] = static_cast<uint64_t>(k) * 0x9e3779b97f4a7c15ull;
        break;
      case DType::kComplex64:
        t.data<float>()[2 * i] = static_cast<float>(k % 1000 - 500) * 0.5f;
        t.data<float>()[2 * i + 1] = static_cast<float>(k % 77) * -0.25f;
        break;
      case DType::kFloat6E2M3FN:
      case DType::kFloat6E3M2FN:
      case DType::kFloat4E2M1FNx2:
        break;  // SubByteBytes above
      case DType::kInt16:
        t.data<int16_t>()[i] = static_cast<int16_t>(k % 65536 - 32768);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(7 * k - 100000);
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = k * 1000003 - 5;
        break;
      case DType::kFloat16:
        t.data<uint16_t>()[i] = internal::FloatToFloat16(static_cast<float>(k % 2048 - 1024));
        break;
      case DType::kBFloat16:
        t.data<uint16_t>()[i] = internal::FloatToBFloat16(static_cast<float>(k % 256 - 128));
        break;
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(k % 100000 - 50000) * 0.5f;
        break;
      case DType::kFloat64:
        t.data<double>()[i] = static_cast<double>(k) * 0.25 - 12345.0;
        break;
    }
  }
  return t;
}

Tensor FiniteBytes(IntSpan shape, DType dtype, int64_t seed) {
  Tensor t = *Tensor::Empty(shape, dtype);
  auto* bytes = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t k = 0; k < t.nbytes(); ++k) {
    bytes[k] = dtype == DType::kBool ? static_cast<uint8_t>((k + seed) % 2)
                                     : static_cast<uint8_t>((k * 7 + seed) % 0x3f + 1);
  }
  return t;
}

uint8_t HashByte(uint64_t seed, int rank, int64_t index) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull +
               static_cast<uint64_t>(index);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint8_t>(x ^ (x >> 31));
}

void FillHashBytes(const Tensor& t, uint64_t seed, int rank, int64_t first_byte) {
  if (!t.device().is_cpu() || !t.is_contiguous()) {
    ADD_FAILURE() << "FillHashBytes: not a contiguous CPU tensor: " << t.ToString();
    return;
  }
  auto* bytes = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] = HashByte(seed, rank, first_byte + i);
}

Tensor HashBytes(IntSpan shape, DType dtype, uint64_t seed, int rank) {
  Tensor t = *Tensor::Empty(shape, dtype);
  FillHashBytes(t, seed, rank);
  if (dtype == DType::kBool) {
    auto* bytes = static_cast<uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  }
  return t;
}

std::vector<uint8_t> HashByteVector(int64_t n, uint64_t seed) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) bytes[static_cast<size_t>(i)] = HashByte(seed, 0, i);
  return bytes;
}

Tensor Full(IntSpan shape, float value) {
  Tensor t = *Tensor::Empty(shape, DType::kFloat32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value;
  return t;
}

}  // namespace sdrt::test
