#include "sdrt/core/distributed/internal/buckets.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::StatusOr<Tensor> ByteView(const Tensor& buffer, int64_t byte_offset, DType dtype,
                                IntSpan shape) {
  const int64_t elem = ElementSize(dtype);
  if (byte_offset % elem != 0 || (buffer.storage_offset() * buffer.element_size()) % elem != 0) {
    return absl::InternalError(absl::StrCat("ByteView: byte offset ", byte_offset,
                                            " is not aligned for ", DTypeName(dtype)));
  }
  return Tensor::FromStorage(
      buffer.storage(), dtype, shape, ContiguousStrides(shape),
      (buffer.storage_offset() * buffer.element_size() + byte_offset) / elem);
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
    const int64_t elem = tensors[t].element_size;
    if (numel * elem <= bucket_bytes || ndim == 0) {
      packer.Add({t, IntVector(shape.size(), 0), shape, numel * elem, 0});
      continue;
    }
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
