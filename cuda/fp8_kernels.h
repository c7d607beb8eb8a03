// The block-FP8 kernels: the device side of RunFp8Box (tensor/backend/fp8_box.h), which the
// CUDA backend (cuda_backend.cc) runs for an FP8 op whose buffers are on a CUDA device: the
// weight map's FP8 leaves in GPU buffers (the amax of each 128 x 128 block or tensor, the
// codes with their tile's scale, the dequantization of codes and scales), and the transfer
// engine's FP8 codes packed into a device bucket.
//
// Bit for bit the host loops (tensor/internal/fp8_scale.h): the same per-element codecs
// (float_cast.h's FloatCodec, host and device code), the same tile index (BoxTileIndex) and
// IEEE float32 division and multiplication (no fast-math flags). The amax is reduced a chunk
// at a time, a chunk being the part of the box in one tile (ChunkCount / ChunkBegin, host and
// device code the CPU tests run), one thread block per chunk and one atomic max per chunk.
//
// Contract as cuda/kernels.h's: the current CUDA device owns `stream` and every pointer is
// accessible from it; OK means enqueued; the launch's own status; InvalidArgument (the
// checks of ValidateFp8Box) before anything is enqueued; an empty box enqueues nothing.
// kTileAmax raises the grid's entries, so the caller zeroes them first.
#ifndef SDRT_CUDA_FP8_KERNELS_H_
#define SDRT_CUDA_FP8_KERNELS_H_

#include "absl/status/status.h"
#include "sdrt/export.h"
#include "sdrt/tensor/backend/fp8_box.h"
#include "sdrt/tensor/device.h"

namespace sdrt SDRT_API {

// Runs `op` (tensor/backend/fp8_box.h) on the current device, enqueued on `stream`.
absl::Status Fp8BoxDevice(const Fp8BoxOp& op, StreamHandle stream);

}  // namespace sdrt

#endif  // SDRT_CUDA_FP8_KERNELS_H_
