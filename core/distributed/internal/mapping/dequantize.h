// FP8 sources into wider destinations (issue 30; quantize.h's inverse): a source tensor of
// float8_e4m3fn or float8_e5m2 codes next to a source named as it plus "_scale_inv" (a
// float32 or float8_e8m0fnu scale per 128 x 128 block, DeepSeek-V3's checkpoints) or plus
// "_scale" (one for the tensor), taken by a destination of float32, bfloat16 or float16, is
// dequantized as PyTorch's recipe does: (q.float() * scale).to(dtype).
//
// How it is lowered (lowering.h): the destination's views go into staging locals of the
// codes' dtype and the leaf's local shapes, so the codes move as they are (the wire carries
// one byte per element); the scale tensor, small, is moved whole to every rank holding a
// piece of such a destination (a lowered leaf of its own, one box of the whole tensor per
// such rank, fresh locals); after the move each rank multiplies what it holds (its views'
// global offsets pick each element's block). No piece needs whole blocks. Locals of any device.
// Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_DEQUANTIZE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_DEQUANTIZE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/mapping/quantize.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

struct DequantizedSource {
  std::string name;        // the codes' source tensor
  std::string scale_name;  // its scales' source tensor
  DType codes = DType::kFloat8E4M3FN;
  DType scale = DType::kFloat32;
  int64_t tile = 0;  // kFp8BlockSize ("_scale_inv"), or 0: one scale ("_scale")
  IntVector shape;   // the codes'
  IntVector scale_shape;
};

// The dequantized source `source` (a source leaf's first description) is for a destination
// of `destination_dtype`: set when the codes are fp8, the destination a wider float and a
// source leaf of its scales exists (`find_source(name)`). InvalidArgument naming both for
// scales of another dtype than float32 / float8_e8m0fnu or of the wrong shape
// ([ceil(rows / 128), ceil(cols / 128)] of 2-D codes; one element per tensor).
absl::StatusOr<std::optional<DequantizedSource>> FindDequantized(
    const LeafLayout& source, DType destination_dtype,
    const std::function<const LeafLayout*(const std::string&)>& find_source);

// One local of a dequantized leaf on this rank: the codes the engine filled (`staging`, rows
// in views) and the leaf's local the values go into.
struct DequantizeLocal {
  Tensor staging, values;
  std::vector<QuantizeView> views;  // QuantizeView::source: an index into sources
};

struct DequantizeWork {
  std::vector<DequantizedSource> sources;  // the lowering's, alike on every rank
  std::vector<Tensor> scales;              // per source, this rank's whole copy (or none)
  std::vector<DequantizeLocal> locals;
  bool any() const { return !locals.empty(); }
};

// After a move: every local's values from its staging codes and the scales. InvalidArgument
// for a view whose scales this rank lacks (a lowering error).
absl::Status FinishDequantized(const DequantizeWork& work);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_DEQUANTIZE_H_
