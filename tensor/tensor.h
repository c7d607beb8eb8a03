// Tensor: a strided view of a Storage, the one array type of sdrt.
//
// A Tensor is storage + storage_offset + shape + strides + dtype + device, with shape,
// strides and offset in ELEMENTS, in PyTorch order (dim 0 outermost). Copying a Tensor
// object is cheap and aliases the same bytes (like a PyTorch tensor handle); Clone()
// copies the bytes. A meta tensor has a shape and dtype but no storage.
//
// A tensor of a sub-byte dtype (tensor/dtype.h) exists only where its bytes can be reached
// whole: its offset, its runs of adjacent elements and the distances between runs are whole
// bytes (a contiguous tensor needs only numel * bits / 8 to be whole). A factory or view
// that would cut an element's byte is InvalidArgument naming the dtype, the geometry and
// the cut.
//
// Views (Narrow, Slice, Select, View, Reshape, Flatten) share the storage. Functions
// that can fail return absl::Status / absl::StatusOr with a message naming the op, the
// dim and the sizes; none throws. Negative dims count from the end, as in PyTorch.
//
// Thread-safety: distinct Tensor objects may be used from different threads; the bytes
// they share are not synchronised.
#ifndef SDRT_TENSOR_TENSOR_H_
#define SDRT_TENSOR_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/shape.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class Tensor;
// The overlap rules of Tensor::CopyFrom (see there); OK when the copy is well defined.
absl::Status CheckCopyOverlap(const Tensor& dst, const Tensor& src);

class Tensor {
 public:
  // An undefined tensor (defined() == false), like a default-constructed at::Tensor.
  Tensor() = default;

  // --- factories ---------------------------------------------------------------------
  // Uninitialised contiguous tensor. CPU memory is 256-byte aligned; CUDA memory comes
  // from the registered CUDA backend (FailedPrecondition without one); meta allocates
  // nothing. InvalidArgument on negative sizes, element-count overflow, or elements that
  // are not a whole number of bytes (BytesForElements).
  static absl::StatusOr<Tensor> Empty(IntSpan shape, DType dtype, Device device = Device::CPU());
  // Zero-filled contiguous tensor (CPU: memset; CUDA: cudaMemsetAsync on the device's
  // default stream, complete on return; meta: no data).
  static absl::StatusOr<Tensor> Zeros(IntSpan shape, DType dtype, Device device = Device::CPU());
  // A meta tensor: shape, dtype, contiguous strides, no storage.
  static absl::StatusOr<Tensor> Meta(IntSpan shape, DType dtype);
  // A view of `storage`. Checks that every reachable element lies inside the storage
  // (OutOfRange otherwise), that sizes, strides and offset are non-negative, and the
  // sub-byte rule above (InvalidArgument).
  static absl::StatusOr<Tensor> FromStorage(std::shared_ptr<Storage> storage, DType dtype,
                                            IntSpan shape, IntSpan strides,
                                            int64_t storage_offset = 0);
  // Contiguous view of `storage` from byte 0.
  static absl::StatusOr<Tensor> FromStorage(std::shared_ptr<Storage> storage, DType dtype,
                                            IntSpan shape);
  // Contiguous view of `storage` from byte `byte_offset`, which need not hold a whole
  // number of elements (a 6-bit tensor at byte 16): the view then borrows the bytes from
  // there, keeping `storage` alive (and pinned if it is). Rules and errors as FromStorage.
  static absl::StatusOr<Tensor> AtByteOffset(std::shared_ptr<Storage> storage, int64_t byte_offset,
                                             DType dtype, IntSpan shape);

  // --- metadata ----------------------------------------------------------------------
  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_meta() const { return device_.is_meta(); }
  const IntVector& shape() const { return shape_; }
  const IntVector& strides() const { return strides_; }
  int64_t storage_offset() const { return storage_offset_; }  // elements
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;  // dim may be negative; debug-asserts range
  int64_t numel() const { return numel_; }
  // Bytes of the elements (numel * bits / 8; whole for every tensor that exists).
  int64_t nbytes() const {
    const int bits = ElementBits(dtype_);
    return IsSubByte(dtype_) ? numel_ * bits / 8 : numel_ * (bits / 8);
  }
  // True when the strides are the row-major ones (ignoring dims of size 1 and tensors
  // with no elements), as torch.Tensor.is_contiguous().
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Address of element (0, ..., 0); nullptr for meta tensors and empty storages.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  // "float32[3, 4] cpu" plus " strides=[..] offset=N" when not contiguous.
  std::string ToString() const;

  // --- views (share storage) -----------------------------------------------------------
  // torch.narrow: elements [start, start + length) of `dim`; start may be negative.
  absl::StatusOr<Tensor> Narrow(int dim, int64_t start, int64_t length) const;
  // Python slicing x[..., start:end:step, ...] on `dim`: start/end clamp to [0, size]
  // after negative wrap-around; step must be > 0.
  absl::StatusOr<Tensor> Slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  // torch.select: removes `dim`, keeping index `index` (may be negative).
  absl::StatusOr<Tensor> Select(int dim, int64_t index) const;
  // torch.Tensor.view: a new shape (one entry may be -1) over the same elements, without
  // copying; FailedPrecondition when the strides do not allow it (use Reshape).
  absl::StatusOr<Tensor> View(IntSpan shape) const;
  // torch.reshape: View when possible, else a contiguous copy viewed.
  absl::StatusOr<Tensor> Reshape(IntSpan shape) const;
  // torch.flatten(start_dim, end_dim): merges dims [start_dim, end_dim] (Reshape rules).
  absl::StatusOr<Tensor> Flatten(int start_dim = 0, int end_dim = -1) const;

  // --- copies --------------------------------------------------------------------------
  // This tensor if already contiguous (same object), else a contiguous copy on the same
  // device. Copies (here and in Clone, Reshape, To) handle at most 12 dims after
  // adjacent dims that are contiguous on both sides are merged (kMaxCopyDims).
  absl::StatusOr<Tensor> Contiguous() const;
  // A contiguous copy in new memory on the same device (meta: a new meta tensor).
  absl::StatusOr<Tensor> Clone() const;
  // torch.Tensor.to(device): returns *this (an alias) when already on `device`, else a
  // contiguous copy there. CUDA copies run on `stream` (nullptr = default stream); with
  // non_blocking the call may return before the copy completes (the caller synchronises
  // the stream before reading). Copying from meta is FailedPrecondition.
  absl::StatusOr<Tensor> To(Device device, bool non_blocking = false,
                            StreamHandle stream = nullptr) const;
  // torch.Tensor.copy_(src) for equal shapes and dtypes (no broadcasting, no dtype
  // conversion: InvalidArgument naming both shapes/dtypes otherwise). Any strides on
  // either side, as long as they merge to at most 12 dims (kMaxCopyDims). Like PyTorch,
  // InvalidArgument when the destination has aliased elements (stride 0) or partly
  // overlaps the source; copying a tensor onto itself is a no-op. CPU<->CPU runs here; anything
  // touching CUDA goes through the CUDA backend on `stream`, a stream of the CUDA side's device
  // (between two CUDA devices, the destination's). non_blocking is honoured when both sides
  // are contiguous, both are on one device, or the copy is at most
  // internal::kMaxPitchedCopies pitched copies (the innermost dim whole on both sides, as
  // in a Shard(1) block: tensor/backend/pitched_copy.h); a copy across devices that must be
  // staged through a temporary completes before returning.
  absl::Status CopyFrom(const Tensor& src, bool non_blocking = false,
                        StreamHandle stream = nullptr);

 private:
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Device device, IntVector shape,
         IntVector strides, int64_t storage_offset);
  // Wraps a possibly negative dim; InvalidArgument naming `op` when out of range.
  absl::StatusOr<int> WrapDim(int dim, const char* op) const;
  // A view of the same storage; the sub-byte rule is checked (errors name `op`).
  absl::StatusOr<Tensor> WithGeometry(const char* op, IntVector shape, IntVector strides,
                                      int64_t storage_offset) const;

  bool defined_ = false;
  std::shared_ptr<Storage> storage_;  // null for meta tensors
  DType dtype_ = DType::kFloat32;
  Device device_ = Device::CPU();
  IntVector shape_;
  IntVector strides_;
  int64_t storage_offset_ = 0;  // elements
  int64_t numel_ = 0;           // cached product of shape_
};

}  // namespace sdrt

#endif  // SDRT_TENSOR_TENSOR_H_
