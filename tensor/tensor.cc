// Tensor construction, metadata and copies. Views are in tensor_views.cc.
#include "sdrt/tensor/tensor.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/backend/pitched_copy.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tensor/internal/byte_layout.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

namespace {

// torch's is_non_overlapping_and_dense: the elements fill a contiguous range exactly
// once, in some order of the dims.
bool NonOverlappingAndDense(const Tensor& t) {
  IntVector dims;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] != 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(),
            [&](int64_t a, int64_t b) { return t.strides()[a] < t.strides()[b]; });
  int64_t expected = 1;
  for (int64_t d : dims) {
    if (t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

}  // namespace

// PyTorch's copy_ refuses a destination whose elements alias each other and a source
// that partly overlaps the destination (the result would depend on the copy order);
// so does sdrt. Overlap is decided exactly where both sides are dense (as PyTorch
// does) and by a zero stride for the destination's own elements.
absl::Status CheckCopyOverlap(const Tensor& dst, const Tensor& src) {
  for (int d = 0; d < dst.dim(); ++d) {
    if (dst.shape()[d] > 1 && dst.strides()[d] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CopyFrom: destination ", dst.ToString(),
                       " has several elements at one memory location (stride 0 on dim ", d, ")"));
    }
  }
  if (dst.storage() == nullptr || dst.storage() != src.storage()) return absl::OkStatus();
  if (dst.storage_offset() == src.storage_offset() && dst.strides() == src.strides()) {
    return absl::OkStatus();
  }
  if (!NonOverlappingAndDense(dst) || !NonOverlappingAndDense(src)) return absl::OkStatus();
  const int64_t dst_end = dst.storage_offset() + dst.numel();
  const int64_t src_end = src.storage_offset() + src.numel();
  if (dst.storage_offset() < src_end && src.storage_offset() < dst_end) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyFrom: source ", src.ToString(), " and destination ", dst.ToString(),
                     " partly overlap in memory; copy from a Clone() of the source"));
  }
  return absl::OkStatus();
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Device device, IntVector shape,
               IntVector strides, int64_t storage_offset)
    : defined_(true),
      storage_(std::move(storage)),
      dtype_(dtype),
      device_(device),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      storage_offset_(storage_offset) {
  numel_ = 1;
  for (int64_t s : shape_) numel_ *= s;
}

absl::StatusOr<Tensor> Tensor::Empty(IntSpan shape, DType dtype, Device device) {
  SDRT_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(shape));
  absl::StatusOr<int64_t> nbytes_or = BytesForElements(dtype, numel);
  if (!nbytes_or.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Empty: ", ShapeToString(shape), ": ", nbytes_or.status().message()));
  }
  const int64_t nbytes = *nbytes_or;
  std::shared_ptr<Storage> storage;
  switch (device.type) {
    case DeviceType::kMeta:
      break;
    case DeviceType::kCPU: {
      SDRT_ASSIGN_OR_RETURN(storage, Storage::AllocateCpu(nbytes));
      break;
    }
    case DeviceType::kCUDA: {
      SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(DeviceType::kCUDA));
      SDRT_ASSIGN_OR_RETURN(storage, backend->Allocate(nbytes, device));
      break;
    }
  }
  return Tensor(std::move(storage), dtype, device, IntVector(shape.begin(), shape.end()),
                ContiguousStrides(shape), 0);
}

absl::StatusOr<Tensor> Tensor::Zeros(IntSpan shape, DType dtype, Device device) {
  SDRT_ASSIGN_OR_RETURN(Tensor out, Empty(shape, dtype, device));
  if (device.is_meta() || out.nbytes() == 0) return out;
  if (device.is_cpu()) {
    std::memset(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()));
    return out;
  }
  SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(DeviceType::kCUDA));
  SDRT_RETURN_IF_ERROR(backend->Memset(out.data_ptr(), 0, out.nbytes(), device, /*stream=*/nullptr,
                                       /*non_blocking=*/false));
  return out;
}

absl::StatusOr<Tensor> Tensor::Meta(IntSpan shape, DType dtype) {
  return Empty(shape, dtype, Device::Meta());
}

absl::StatusOr<Tensor> Tensor::FromStorage(std::shared_ptr<Storage> storage, DType dtype,
                                           IntSpan shape) {
  const IntVector strides = ContiguousStrides(shape);
  return FromStorage(std::move(storage), dtype, shape, strides, 0);
}

absl::StatusOr<Tensor> Tensor::FromStorage(std::shared_ptr<Storage> storage, DType dtype,
                                           IntSpan shape, IntSpan strides, int64_t storage_offset) {
  if (storage == nullptr) return absl::InvalidArgumentError("FromStorage: null storage");
  if (shape.size() != strides.size()) {
    return absl::InvalidArgumentError(absl::StrCat("FromStorage: shape ", ShapeToString(shape),
                                                   " and strides ", ShapeToString(strides),
                                                   " differ in length"));
  }
  SDRT_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(shape));
  if (storage_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FromStorage: negative storage offset ", storage_offset));
  }
  // Furthest element reachable, in elements from the storage start.
  int64_t last = storage_offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (strides[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("FromStorage: dim ", i, " has negative stride ", strides[i]));
    }
    if (numel > 0) {
      int64_t reach = 0;
      if (__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
          __builtin_add_overflow(last, reach, &last)) {
        return absl::OutOfRangeError("FromStorage: strides overflow int64");
      }
    }
  }
  // Bits up to the end of the furthest element; the bytes holding them must exist.
  int64_t end_bits = 0;
  if (__builtin_mul_overflow(last + 1, ElementBits(dtype), &end_bits)) {
    return absl::OutOfRangeError(absl::StrCat("FromStorage: ", ShapeToString(shape), " of ",
                                              DTypeName(dtype), " overflows int64 bytes"));
  }
  const int64_t needed = end_bits / 8 + (end_bits % 8 != 0);
  if (numel > 0 && needed > storage->nbytes()) {
    return absl::OutOfRangeError(absl::StrCat("FromStorage: ", ShapeToString(shape), " strides ",
                                              ShapeToString(strides), " offset ", storage_offset,
                                              " of ", DTypeName(dtype), " needs ", needed,
                                              " bytes but the storage has ", storage->nbytes()));
  }
  SDRT_RETURN_IF_ERROR(
      internal::CheckByteAddressable("FromStorage", dtype, shape, strides, storage_offset));
  if (absl::Status bytes = BytesForElements(dtype, numel).status(); !bytes.ok()) {
    return absl::OutOfRangeError(
        absl::StrCat("FromStorage: ", ShapeToString(shape), ": ", bytes.message()));
  }
  const Device device = storage->device();
  return Tensor(std::move(storage), dtype, device, IntVector(shape.begin(), shape.end()),
                IntVector(strides.begin(), strides.end()), storage_offset);
}

absl::StatusOr<Tensor> Tensor::AtByteOffset(std::shared_ptr<Storage> storage, int64_t byte_offset,
                                            DType dtype, IntSpan shape) {
  if (storage == nullptr) return absl::InvalidArgumentError("AtByteOffset: null storage");
  if (byte_offset < 0 || byte_offset > storage->nbytes()) {
    return absl::OutOfRangeError(absl::StrCat("AtByteOffset: byte offset ", byte_offset,
                                              " outside the ", storage->nbytes(), "-byte storage"));
  }
  const IntVector strides = ContiguousStrides(shape);
  if (absl::StatusOr<int64_t> at = ElementsForBytes(dtype, byte_offset); at.ok()) {
    return FromStorage(std::move(storage), dtype, shape, strides, *at);
  }
  char* const data = static_cast<char*>(storage->data()) + byte_offset;
  const bool pinned = storage->is_pinned();
  const int64_t rest = storage->nbytes() - byte_offset;
  const Device device = storage->device();
  std::shared_ptr<Storage> view =
      Storage::Borrow(data, rest, device, [keep = std::move(storage)](void*) {});
  if (pinned) view->MarkPinned();
  return FromStorage(std::move(view), dtype, shape, strides, 0);
}

int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += this->dim();
  assert(dim >= 0 && dim < this->dim());
  return shape_[dim];
}

bool Tensor::is_contiguous() const {
  if (numel_ == 0) return true;
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  if (storage_ == nullptr || storage_->data() == nullptr) return nullptr;
  // Whole bytes: the offset of a tensor with elements is checked when it is made (an empty
  // sub-byte tensor's address is rounded down; nothing is read there).
  const int bits = ElementBits(dtype_);
  const int64_t byte_offset =
      IsSubByte(dtype_) ? storage_offset_ * bits / 8 : storage_offset_ * (bits / 8);
  return static_cast<char*>(storage_->data()) + byte_offset;
}

std::string Tensor::ToString() const {
  if (!defined_) return "undefined";
  std::string out = absl::StrCat(DTypeName(dtype_), ShapeToString(shape_), " ", device_.ToString());
  if (!is_contiguous() || storage_offset_ != 0) {
    absl::StrAppend(&out, " strides=", ShapeToString(strides_), " offset=", storage_offset_);
  }
  return out;
}

absl::StatusOr<Tensor> Tensor::Contiguous() const {
  if (!defined_) return absl::FailedPreconditionError("Contiguous: undefined tensor");
  if (is_contiguous()) return *this;
  return Clone();
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  if (!defined_) return absl::FailedPreconditionError("Clone: undefined tensor");
  SDRT_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, device_));
  if (is_meta()) return out;
  SDRT_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

absl::StatusOr<Tensor> Tensor::To(Device device, bool non_blocking, StreamHandle stream) const {
  if (!defined_) return absl::FailedPreconditionError("To: undefined tensor");
  if (device == device_) return *this;
  if (is_meta()) {
    return absl::FailedPreconditionError(absl::StrCat("To(", device.ToString(), "): ", ToString(),
                                                      " is a meta tensor and has no data"));
  }
  SDRT_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, device));
  if (device.is_meta()) return out;
  SDRT_RETURN_IF_ERROR(out.CopyFrom(*this, non_blocking, stream));
  return out;
}

absl::Status Tensor::CopyFrom(const Tensor& src, bool non_blocking, StreamHandle stream) {
  if (!defined_ || !src.defined_)
    return absl::FailedPreconditionError("CopyFrom: undefined tensor");
  if (shape_ != src.shape_ || dtype_ != src.dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("CopyFrom: destination ", ToString(),
                                                   " and source ", src.ToString(),
                                                   " differ in shape or dtype"));
  }
  if (is_meta() || src.is_meta()) {
    if (is_meta() && src.is_meta()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("CopyFrom: cannot copy between ",
                                                      src.ToString(), " and ", ToString(),
                                                      " (meta has no data)"));
  }
  if (numel_ == 0) return absl::OkStatus();
  SDRT_RETURN_IF_ERROR(CheckCopyOverlap(*this, src));
  if (storage_ == src.storage_ && storage_offset_ == src.storage_offset_ &&
      strides_ == src.strides_) {
    return absl::OkStatus();  // a copy of a tensor onto itself: nothing to do
  }
  // Sub-byte elements are copied as the bytes that hold them.
  int64_t unit = ElementBits(dtype_) / 8;
  internal::ByteCopy geometry{shape_, strides_, src.strides_};
  if (IsSubByte(dtype_)) {
    unit = 1;
    SDRT_ASSIGN_OR_RETURN(
        geometry, internal::SubByteCopy("CopyFrom", dtype_, shape_, strides_, storage_offset_,
                                        src.strides_, src.storage_offset_));
  }
  if (device_.is_cpu() && src.device_.is_cpu()) {
    return StridedCopyHost(data_ptr(), src.data_ptr(), unit, geometry.sizes, geometry.dst_strides,
                           geometry.src_strides);
  }
  SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(DeviceType::kCUDA));
  if (device_ == src.device_) {
    return backend->StridedCopy(data_ptr(), src.data_ptr(), unit, geometry.sizes,
                                geometry.dst_strides, geometry.src_strides, device_, stream,
                                non_blocking);
  }
  // Across devices the bytes move with one contiguous memcpy on `stream`, or with at most
  // kMaxPitchedCopies pitched copies when the innermost dim is whole on both sides (a
  // Shard(1) block, a row-major sub-block: no temporary, non_blocking honoured). Otherwise
  // a strided side is staged through a contiguous temporary on its own device, and the
  // call completes before returning so the temporaries outlive the copies. A strided CUDA
  // source is packed on `stream` when `stream` is its device's (the destination is the host), so
  // the packing is ordered after the caller's work on that stream; between two devices
  // `stream` is the destination's and the source packs on its device's default stream.
  if (is_contiguous() && src.is_contiguous()) {
    return backend->Memcpy(data_ptr(), device_, src.data_ptr(), src.device_, nbytes(), stream,
                           non_blocking);
  }
  std::vector<internal::PitchedCopy> pitched;
  if (internal::PlanPitchedCopies(unit, geometry.sizes, geometry.dst_strides,
                                  geometry.src_strides, internal::kMaxPitchedCopies, pitched)) {
    uint8_t* const dst = static_cast<uint8_t*>(data_ptr());
    const uint8_t* const from = static_cast<const uint8_t*>(src.data_ptr());
    for (size_t i = 0; i < pitched.size(); ++i) {
      const internal::PitchedCopy& c = pitched[i];
      SDRT_RETURN_IF_ERROR(backend->Memcpy2D(
          dst + c.dst_offset, c.dst_pitch, device_, from + c.src_offset, c.src_pitch,
          src.device_, c.width, c.height, stream,
          /*non_blocking=*/non_blocking || i + 1 < pitched.size()));
    }
    return absl::OkStatus();
  }
  Tensor packed = src;
  if (!src.is_contiguous()) {
    SDRT_ASSIGN_OR_RETURN(packed, Empty(src.shape_, src.dtype_, src.device_));
    const bool stream_is_src = device_.is_cpu();
    SDRT_RETURN_IF_ERROR(
        packed.CopyFrom(src, /*non_blocking=*/stream_is_src, stream_is_src ? stream : nullptr));
  }
  if (is_contiguous()) {
    return backend->Memcpy(data_ptr(), device_, packed.data_ptr(), src.device_, nbytes(), stream,
                           /*non_blocking=*/false);
  }
  SDRT_ASSIGN_OR_RETURN(Tensor landing, Empty(shape_, dtype_, device_));
  SDRT_RETURN_IF_ERROR(backend->Memcpy(landing.data_ptr(), device_, packed.data_ptr(), src.device_,
                                       nbytes(), stream, /*non_blocking=*/false));
  return CopyFrom(landing, /*non_blocking=*/false, stream);
}

}  // namespace sdrt
