#include "sdrt/tensor/backend/dlpack.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// What an exported DLManagedTensor owns: the tensor (and so its storage) and the
// int64 arrays DLTensor points at.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed;
};

void DeleteExport(DLManagedTensor* managed) {
  delete static_cast<ExportContext*>(managed->manager_ctx);
}

}  // namespace

absl::StatusOr<DLManagedTensor*> ToDLPack(const Tensor& tensor) {
  if (!tensor.defined() || tensor.is_meta()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ToDLPack: cannot export ", tensor.ToString(), " (no storage)"));
  }
  auto ctx = std::make_unique<ExportContext>();
  ctx->tensor = tensor;
  ctx->shape.assign(tensor.shape().begin(), tensor.shape().end());
  ctx->strides.assign(tensor.strides().begin(), tensor.strides().end());
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = tensor.data_ptr();
  if (tensor.device().is_cuda()) {
    dl.device = DLDevice{kDLCUDA, tensor.device().index};
  } else {
    const bool pinned = tensor.storage() != nullptr && tensor.storage()->is_pinned();
    dl.device = DLDevice{pinned ? kDLCUDAHost : kDLCPU, 0};
  }
  dl.ndim = tensor.dim();
  const DLPackType type = ToDLPackType(tensor.dtype());
  dl.dtype = DLDataType{type.code, type.bits, 1};
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &DeleteExport;
  return &ctx.release()->managed;
}

absl::StatusOr<Tensor> FromDLPack(DLManagedTensor* managed) {
  if (managed == nullptr) return absl::InvalidArgumentError("FromDLPack: null DLManagedTensor");
  const DLTensor& dl = managed->dl_tensor;
  Device device;
  switch (dl.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      device = Device::CPU();
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      device = Device::CUDA(dl.device.device_id);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("FromDLPack: unsupported DLPack device type ", dl.device.device_type));
  }
  SDRT_ASSIGN_OR_RETURN(DType dtype, DTypeFromDLPack(dl.dtype.code, dl.dtype.bits, dl.dtype.lanes));
  if (dl.ndim < 0 || (dl.ndim > 0 && dl.shape == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("FromDLPack: bad ndim ", dl.ndim));
  }
  const IntVector shape(dl.shape, dl.shape + dl.ndim);
  const IntVector strides = dl.strides != nullptr ? IntVector(dl.strides, dl.strides + dl.ndim)
                                                  : ContiguousStrides(shape);
  SDRT_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(shape));
  // Bytes reachable from the first element: the storage this tensor borrows. Computed
  // with overflow checks before taking ownership, so every error leaves `managed` with
  // the caller.
  int64_t last = 0;
  for (int i = 0; i < dl.ndim; ++i) {
    if (strides[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("FromDLPack: negative stride ", strides[i], " at dim ", i));
    }
    int64_t reach = 0;
    if (numel > 0 && (__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
                      __builtin_add_overflow(last, reach, &last))) {
      return absl::InvalidArgumentError(absl::StrCat("FromDLPack: shape ", ShapeToString(shape),
                                                     " with strides ", ShapeToString(strides),
                                                     " overflows int64"));
    }
  }
  // The bytes holding elements [0, last] (sub-byte elements are packed, DLPack 1.1).
  int64_t nbits = 0;
  if (numel > 0 && __builtin_mul_overflow(last + 1, ElementBits(dtype), &nbits)) {
    return absl::InvalidArgumentError("FromDLPack: byte extent overflows int64");
  }
  const int64_t nbytes = nbits / 8 + (nbits % 8 != 0);
  char* data = static_cast<char*>(dl.data) + dl.byte_offset;
  std::shared_ptr<Storage> storage = Storage::Borrow(data, nbytes, device, [managed](void*) {
    if (managed->deleter != nullptr) managed->deleter(managed);
  });
  // The producer's page-locked memory: pinned, but not sdrt's to register or unregister.
  if (dl.device.device_type == kDLCUDAHost) storage->MarkPinned();
  return Tensor::FromStorage(std::move(storage), dtype, shape, strides, 0);
}

}  // namespace sdrt
