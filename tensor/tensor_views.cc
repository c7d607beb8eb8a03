// Tensor views: narrow, slice, select, view/reshape, flatten. None copies except
// Reshape and Flatten when the strides leave no other way (as in PyTorch).
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/internal/byte_layout.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt {
namespace {

// torch's infer_size: resolves one -1 entry against `numel`.
absl::StatusOr<IntVector> InferShape(IntSpan shape, int64_t numel, const char* op) {
  IntVector out(shape.begin(), shape.end());
  int infer_dim = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_dim >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": only one dim may be -1 in ", ShapeToString(shape)));
      }
      infer_dim = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": invalid size ", shape[i], " at dim ", i,
                                                     " of ", ShapeToString(shape)));
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", ShapeToString(shape), " overflows"));
    }
  }
  if (infer_dim >= 0) {
    if (known == 0 || numel % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": shape ", ShapeToString(shape),
                                                     " is invalid for input of size ", numel));
    }
    out[infer_dim] = numel / known;
  } else if (known != numel) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": shape ", ShapeToString(shape),
                                                   " is invalid for input of size ", numel));
  }
  return out;
}

// PyTorch's computeStride: strides for viewing (old_shape, old_strides) as new_shape
// without moving data, or nullopt when the memory layout does not allow it.
std::optional<IntVector> ViewStrides(IntSpan old_shape, IntSpan old_strides, IntSpan new_shape,
                                     int64_t numel) {
  if (old_shape.empty()) return IntVector(new_shape.size(), 1);
  if (numel == 0) {
    if (IntVector(old_shape.begin(), old_shape.end()) ==
        IntVector(new_shape.begin(), new_shape.end())) {
      return IntVector(old_strides.begin(), old_strides.end());
    }
    return ContiguousStrides(new_shape);
  }
  IntVector new_strides(new_shape.size());
  int view_d = static_cast<int>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int tensor_d = static_cast<int>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    const bool chunk_ends =
        tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

absl::StatusOr<int> Tensor::WrapDim(int dim, const char* op) const {
  const int n = this->dim();
  if (dim < -n || dim >= n || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dim ", dim, " out of range for ", n, "-d tensor ", ToString()));
  }
  return dim < 0 ? dim + n : dim;
}

absl::StatusOr<Tensor> Tensor::WithGeometry(const char* op, IntVector shape, IntVector strides,
                                            int64_t storage_offset) const {
  SDRT_RETURN_IF_ERROR(internal::CheckByteAddressable(op, dtype_, shape, strides, storage_offset));
  return Tensor(storage_, dtype_, device_, std::move(shape), std::move(strides), storage_offset);
}

absl::StatusOr<Tensor> Tensor::Narrow(int dim, int64_t start, int64_t length) const {
  SDRT_ASSIGN_OR_RETURN(int d, WrapDim(dim, "Narrow"));
  const int64_t size = shape_[d];
  if (start < 0) start += size;
  // `length > size - start` rather than `start + length > size`: no overflow.
  if (start < 0 || start > size || length < 0 || length > size - start) {
    return absl::InvalidArgumentError(absl::StrCat("Narrow: start ", start, " length ", length,
                                                   " out of range for dim ", d, " of size ", size));
  }
  IntVector shape = shape_;
  shape[d] = length;
  return WithGeometry("Narrow", std::move(shape), strides_, storage_offset_ + start * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::Slice(int dim, int64_t start, int64_t end, int64_t step) const {
  SDRT_ASSIGN_OR_RETURN(int d, WrapDim(dim, "Slice"));
  if (step <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: step ", step, " must be positive"));
  }
  const int64_t size = shape_[d];
  auto clamp = [size](int64_t i) {
    if (i < 0) i += size;
    return i < 0 ? 0 : (i > size ? size : i);
  };
  start = clamp(start);
  end = clamp(end);
  const int64_t length = end > start ? (end - start + step - 1) / step : 0;
  IntVector shape = shape_;
  IntVector strides = strides_;
  shape[d] = length;
  strides[d] *= step;
  return WithGeometry("Slice", std::move(shape), std::move(strides),
                      storage_offset_ + start * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::Select(int dim, int64_t index) const {
  SDRT_ASSIGN_OR_RETURN(int d, WrapDim(dim, "Select"));
  const int64_t size = shape_[d];
  if (index < -size || index >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Select: index ", index, " out of range for dim ", d, " of size ", size));
  }
  if (index < 0) index += size;
  IntVector shape = shape_;
  IntVector strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return WithGeometry("Select", std::move(shape), std::move(strides),
                      storage_offset_ + index * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::View(IntSpan shape) const {
  if (!defined_) return absl::FailedPreconditionError("View: undefined tensor");
  SDRT_ASSIGN_OR_RETURN(IntVector inferred, InferShape(shape, numel_, "View"));
  std::optional<IntVector> strides = ViewStrides(shape_, strides_, inferred, numel_);
  if (!strides.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("View: ", ToString(), " cannot be viewed as ", ShapeToString(inferred),
                     " without a copy (its strides span several chunks); use Reshape"));
  }
  return WithGeometry("View", std::move(inferred), *std::move(strides), storage_offset_);
}

absl::StatusOr<Tensor> Tensor::Reshape(IntSpan shape) const {
  absl::StatusOr<Tensor> view = View(shape);
  if (view.ok() || view.status().code() != absl::StatusCode::kFailedPrecondition) return view;
  SDRT_ASSIGN_OR_RETURN(Tensor packed, Contiguous());
  return packed.View(shape);
}

absl::StatusOr<Tensor> Tensor::Flatten(int start_dim, int end_dim) const {
  if (dim() == 0) {
    // A 0-d tensor behaves as 1-d for its dim arguments, as in torch.flatten.
    if ((start_dim != 0 && start_dim != -1) || (end_dim != 0 && end_dim != -1)) {
      return absl::InvalidArgumentError(absl::StrCat("Flatten: dims (", start_dim, ", ", end_dim,
                                                     ") out of range for a 0-d tensor"));
    }
    return Reshape(IntVector{1});
  }
  SDRT_ASSIGN_OR_RETURN(int start, WrapDim(start_dim, "Flatten"));
  SDRT_ASSIGN_OR_RETURN(int end, WrapDim(end_dim, "Flatten"));
  if (start > end) {
    return absl::InvalidArgumentError(
        absl::StrCat("Flatten: start_dim ", start, " is after end_dim ", end));
  }
  IntVector shape(shape_.begin(), shape_.begin() + start);
  int64_t merged = 1;
  for (int i = start; i <= end; ++i) merged *= shape_[i];
  shape.push_back(merged);
  shape.insert(shape.end(), shape_.begin() + end + 1, shape_.end());
  return Reshape(shape);
}

}  // namespace sdrt
