// Buckets: how the distributed state-dict operations pack many tensors' bytes into a few
// flat buffers, one collective each. Pure arithmetic plus byte-range views. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_BUCKETS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_BUCKETS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Every piece starts at a multiple of this many bytes in its bucket, so that a view of
// any dtype at that offset is aligned to its element size.
inline constexpr int64_t kBucketAlignment = 16;

constexpr int64_t AlignUp(int64_t bytes) {
  return (bytes + kBucketAlignment - 1) / kBucketAlignment * kBucketAlignment;
}

// The bytes [byte_offset, byte_offset + BytesForElements(numel(shape))) of the contiguous
// uint8 `buffer` as a contiguous tensor of `dtype` and `shape` (shares the storage;
// Tensor::AtByteOffset). byte_offset must be a multiple of ElementAlignment(dtype)
// (Internal otherwise).
absl::StatusOr<Tensor> ByteView(const Tensor& buffer, int64_t byte_offset, DType dtype,
                                IntSpan shape);

// A block of one tensor that is contiguous in its row-major layout: the box [begin, end)
// whose dims before some dim k have length 1 and after k are whole.
struct Piece {
  size_t tensor = 0;   // index into the planned tensors
  IntVector begin;     // per dim, first global index
  IntVector end;       // per dim, one past the last
  int64_t bytes = 0;   // bytes of the box's elements
  int64_t offset = 0;  // byte offset in its bucket, a multiple of kBucketAlignment
};

struct Bucket {
  std::vector<Piece> pieces;
  int64_t bytes = 0;  // used bytes (end of the last piece)
};

struct PlannedTensor {
  IntVector shape;
  int element_bits = 8;  // ElementBits of its dtype
};

// Packs the tensors, in order, into buckets of at most `bucket_bytes` (>= 1) used bytes:
// a tensor that fits in a bucket goes whole, into the current bucket if it fits there
// (after alignment) or else into a new one; a larger tensor is cut into row-major
// contiguous boxes of at most bucket_bytes (one element at least) that fill buckets the
// same way. A larger sub-byte tensor is cut only along dim 0, into boxes of whole bytes;
// when one such box would exceed bucket_bytes it goes whole, alone. Zero-element tensors
// get no piece.
std::vector<Bucket> PlanBuckets(const std::vector<PlannedTensor>& tensors, int64_t bucket_bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_BUCKETS_H_
