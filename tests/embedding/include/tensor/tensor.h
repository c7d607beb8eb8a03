// An embedding program's OWN tensor/tensor.h (not sdrt's): same path as sdrt's
// tensor/tensor.h below the repository root. sdrt's headers must never pick this file up,
// and this program's own include of tensor/tensor.h must never get sdrt's.
#ifndef EMBEDDER_TENSOR_TENSOR_H_
#define EMBEDDER_TENSOR_TENSOR_H_

namespace engine {
struct Tensor {
  static constexpr int kEmbedderTensorMarker = 7;
};
}  // namespace engine

#endif  // EMBEDDER_TENSOR_TENSOR_H_
