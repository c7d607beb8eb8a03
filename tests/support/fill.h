// Deterministic fills for the tests (test code only): every test tensor whose contents are
// made up is made here, from its shape, dtype and a seed (or a start value), so that two
// ranks, two runs or two code paths building "the same" tensor get the same bytes. All
// tensors are new, contiguous CPU tensors.
//
//   Arange        element i holds the value start + i (exact, every dtype)
//   ValuePattern  element i holds an exact value made from 3 i + salt, signs mixed
//   FiniteBytes   bytes in [1, 0x3f]: a finite value in every float format
//   HashBytes     bytes that look random (a hash of seed, rank and byte index)
//   Full          every element holds one float32 value
#ifndef SDRT_TESTS_SUPPORT_FILL_H_
#define SDRT_TESTS_SUPPORT_FILL_H_

#include <cstdint>
#include <vector>

#include "sdrt/tensor/tensor.h"

namespace sdrt::test {

// A tensor of `shape` whose element i (row-major) holds start + i: bool (start + i) % 2,
// uint8 and int8 modulo 2^8, int16 modulo 2^16, float16 and bfloat16 rounded (exact while
// |start + i| <= 2048 and 256), float8 the byte (start + i) mod 127 (a finite value; the
// bit pattern, not the number start + i), uint16/32/64 modulo their range, complex64
// start + i + 0i. Sub-byte dtypes have no addressable elements: byte k holds
// (start + k) mod 256.
Tensor Arange(IntSpan shape, DType dtype = DType::kFloat32, int64_t start = 0);

// A tensor of `shape` whose element i (row-major) holds a value made from k = 3 i + salt,
// exact in its dtype: bool (i + salt) % 3 == 0, integers spread over their range with both
// signs, bfloat16 and float16 in [-128, 128) and [-1024, 1024), float32 and float64
// fractions, float8 a finite nonzero byte, complex64 both parts; sub-byte dtypes byte k
// (3 salt + k) mod 256. Different salts give different tensors.
Tensor ValuePattern(IntSpan shape, DType dtype, int64_t salt);

// A tensor of `shape` whose byte k is (7 k + seed) mod 63 + 1, in [1, 0x3f], so that every
// element is a finite value in every float format (no NaN payloads for a reduction or a
// device copy to canonicalise); bool elements are (k + seed) % 2.
Tensor FiniteBytes(IntSpan shape, DType dtype, int64_t seed = 0);

// Byte `index` of the byte stream of (`seed`, `rank`): a SplitMix64-style hash, so every
// byte looks random and a byte moved elsewhere (a misplaced element) changes the data.
uint8_t HashByte(uint64_t seed, int rank, int64_t index);

// Sets byte i of `t` (contiguous, on the CPU) to HashByte(seed, rank, first_byte + i),
// whatever its dtype (bool elements too: compare such tensors as bytes only).
void FillHashBytes(const Tensor& t, uint64_t seed, int rank = 0, int64_t first_byte = 0);

// A tensor of `shape` filled by FillHashBytes(t, seed, rank), except that bool elements are
// the hash's low bit (valid bools).
Tensor HashBytes(IntSpan shape, DType dtype, uint64_t seed, int rank = 0);

// `n` bytes HashByte(seed, 0, 0 .. n - 1), for buffers that are not tensors.
std::vector<uint8_t> HashByteVector(int64_t n, uint64_t seed);

// A float32 tensor of `shape` whose every element is `value`.
Tensor Full(IntSpan shape, float value);

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_FILL_H_
