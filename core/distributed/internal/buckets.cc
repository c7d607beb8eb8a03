#include "sdrt/core/distributed/internal/buckets.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::StatusOr<Tensor> ByteView(const Tensor& buffer, int64_t byte_offset, DType dtype,
                                IntSpan shape) {
  if (buffer.dtype() != DType::kUInt8) {
    return absl::InternalError(
        absl::StrCat("ByteView: buffer ", buffer.ToString(), " is not uint8"));
  }
  const int64_t at = buffer.storage_offset() + byte_offset;  // bytes from the storage start
  if (at % ElementAlignment(dtype) != 0) {
    return absl::InternalError(absl::StrCat("ByteView: byte offset ", byte_offset,
                                            " is not aligned for ", DTypeName(dtype)));
  }
  return Tensor::AtByteOffset(buffer.storage(), at, dtype, shape);
}

namespace {

class Packer {
 public:
  explicit Packer(int64_t bucket_bytes) : bucket_bytes_(bucket_bytes) {}

  void Add(Piece piece) {
    if (buckets_.empty() || (!buckets_.back().pieces.empty() &&
                             AlignUp(buckets_.back().bytes) + piece.bytes > bucket_bytes_)) {
      buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    piece.offset = b.pieces.empty() ? 0 : AlignUp(b.bytes);
    b.bytes = piece.offset + piece.bytes;
    b.pieces.push_back(std::move(piece));
  }

  std::vector<Bucket> Take() { return std::move(buckets_); }

 private:
  int64_t bucket_bytes_;
  std::vector<Bucket> buckets_;
};

}  // namespace

std::vector<Bucket> PlanBuckets(const std::vector<PlannedTensor>& tensors, int64_t bucket_bytes) {
  Packer packer(bucket_bytes);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const IntVector& shape = tensors[t].shape;
    const int ndim = static_cast<int>(shape.size());
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    if (numel == 0) continue;
    const int bits = tensors[t].element_bits;
    const int64_t total_bytes = numel * bits / 8;  // whole: the tensor exists
    if (total_bytes <= bucket_bytes || ndim == 0) {
      packer.Add({t, IntVector(shape.size(), 0), shape, total_bytes, 0});
      continue;
    }
    if (bits % 8 != 0) {  // sub-byte: cut along dim 0 at whole bytes, or not at all
      const int64_t row_bits = numel / shape[0] * bits;
      const int64_t granule = 8 / std::gcd<int64_t>(row_bits, 8);  // rows per whole byte
      const int64_t rows = bucket_bytes * 8 / row_bits / granule * granule;
      if (rows == 0) {
        packer.Add({t, IntVector(shape.size(), 0), shape, total_bytes, 0});
        continue;
      }
      for (int64_t start = 0; start < shape[0]; start += rows) {
        Piece p;
        p.tensor = t;
        p.begin = IntVector(shape.size(), 0);
        p.end = shape;
        p.begin[0] = start;
        p.end[0] = std::min(shape[0], start + rows);
        p.bytes = (p.end[0] - start) * row_bits / 8;
        packer.Add(std::move(p));
      }
      continue;
    }
    const int64_t elem = bits / 8;
    // Split dim k: the first dim whose inner block (dims after k) fits in a bucket.
    int k = ndim - 1;
    int64_t inner_k = elem;  // bytes of one index of dim k: the dims after k, whole
    for (int d = ndim - 2; d >= 0; --d) {
      const int64_t next = inner_k * shape[d + 1];
      if (next > bucket_bytes) break;
      inner_k = next;
      k = d;
    }
    const int64_t rows = std::max<int64_t>(1, bucket_bytes / inner_k);
    IntVector outer(static_cast<size_t>(k), 0);  // odometer over dims [0, k)
    while (true) {
      for (int64_t start = 0; start < shape[k]; start += rows) {
        Piece p;
        p.tensor = t;
        p.begin = IntVector(shape.size(), 0);
        p.end = shape;
        for (int d = 0; d < k; ++d) {
          p.begin[d] = outer[d];
          p.end[d] = outer[d] + 1;
        }
        p.begin[k] = start;
        p.end[k] = std::min(shape[k], start + rows);
        p.bytes = (p.end[k] - start) * inner_k;
        packer.Add(std::move(p));
      }
      int d = k - 1;
      for (; d >= 0; --d) {
        if (++outer[d] < shape[d]) break;
        outer[d] = 0;
      }
      if (d < 0) break;
    }
  }
  return packer.Take();
}

}  // namespace sdrt::internal
