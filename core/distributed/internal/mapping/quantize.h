// FP8 destinations of a weight map (issue 30; docs/PLAN.md, "FP8 with scales"): a
// destination leaf of float8_e4m3fn or float8_e5m2 codes next to a companion leaf of its
// scales, named as the leaf plus "_scale_inv" (one scale per 128 x 128 block of each source
// tensor, DeepSeek-V3's weight_scale_inv) or plus "_scale" (one for the whole tensor),
// float32 or float8_e8m0fnu. The recipe is fp8_scale.h's (PyTorch's, bit for bit).
//
// How it is lowered: the codes leaf is lowered as any destination (lowering.h), fused,
// padded or as it is. In a reshard the senders quantize: before each move every rank takes
// the amax of each 128 x 128 block (or tensor) over what it holds of the source, one
// all-reduce of them gives every rank every scale, the senders pack codes (the wire carries
// fp8) and each rank writes the scales of the blocks its pieces hold. A load has no sender:
// the views go into staging locals of the source's dtype (made once per call), the readers
// fill them, and each rank quantizes what it holds. Both need each piece of a block-quantized
// leaf to start at a multiple of 128 in the source and in its local (checked at planning,
// on every rank), so a rank's scale local is the blocks of its pieces. Locals of any device:
// the amax, codes and dequantization run where the local is (fp8_boxes.h). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_QUANTIZE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_QUANTIZE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// The block edge of block scales (DeepSeek-V3's and vLLM's 128 x 128).
inline constexpr int64_t kFp8BlockSize = 128;

struct QuantizedDestination {
  std::string path;        // the codes leaf: float8_e4m3fn or float8_e5m2
  std::string scale_path;  // its companion
  DType codes = DType::kFloat8E4M3FN;
  DType scale = DType::kFloat32;  // float32 or float8_e8m0fnu
  int64_t tile = 0;               // kFp8BlockSize, or 0: one scale for the whole tensor
};

// Whether any rank describes a leaf of an fp8 code dtype, on either side (the lowering then
// looks for scales: to quantize into, or to dequantize with).
bool HasCodeLeaves(const std::vector<std::vector<LeafLayout>>& per_rank);
// Whether `tree` holds a tensor leaf of an fp8 code dtype.
bool HasCodeLeaves(const Map& tree);

// The scales beside fp8 codes `path` on one side (`find(name)`: that side's first
// description of leaf `name`, or null): "<path>_scale_inv" (tile kFp8BlockSize) looked for
// first, then "<path>_scale" (tile 0). Null `layout` for none. InvalidArgument naming both
// for scales of another dtype than float32 / float8_e8m0fnu.
struct Fp8Scales {
  const LeafLayout* layout = nullptr;
  std::string name;
  int64_t tile = 0;
};
absl::StatusOr<Fp8Scales> FindFp8Scales(
    const std::string& path, const std::function<const LeafLayout*(const std::string&)>& find);

// The quantized destinations among the destination leaves (`find(path)`: the first rank's
// description of the destination leaf `path`, or null): every leaf of an fp8 code dtype
// with a companion ("_scale_inv" looked for first), in path order. InvalidArgument naming
// the leaf: a companion of another dtype than float32 / float8_e8m0fnu, block scales for a
// tensor that is not 2-D.
absl::StatusOr<std::vector<QuantizedDestination>> FindQuantizedDestinations(
    const std::vector<const LeafLayout*>& destinations,
    const std::function<const LeafLayout*(const std::string&)>& find);

// Checks a lowered destination (of source `source`) whose views go into a quantized leaf, on
// every rank alike: `source_dtype` quantizes (float32, bfloat16, float16), the fused dim is 0 and the tensor
// 2-D, and with block scales every box starts at a multiple of the block in the source on
// both dims and its view at one in its local (`boxes` and `view_starts`, one per box).
// InvalidArgument prefixed by `where` otherwise.
absl::Status CheckQuantizedBoxes(const QuantizedDestination& q, const std::string& source,
                                 DType source_dtype, int dim, const std::vector<TransferBox>& boxes,
                                 const std::vector<int64_t>& view_starts, const std::string& where);

// A source tensor some FP8 leaf is made of, and where its scales lie in the work's grid:
// [grid_rows, grid_cols] entries from `offset` (per tensor: one, its destination's, shared by
// every source of it).
struct QuantizedSource {
  std::string name;     // the plan tensor's: the source's name
  int destination = 0;  // its leaf's index in MapLowering::quantized
  int64_t grid_rows = 1, grid_cols = 1, offset = 0;
  int64_t tensor = -1;  // its plan tensor, where the engine has found it
};

// Rows [start, start + length) of a quantized leaf's local hold source `source`'s elements
// from its global `offsets` on (the local's whole width).
struct QuantizeView {
  int64_t start = 0, length = 0;
  int source = 0;
  IntVector offsets;
};

// One local of a quantized leaf on this rank: its codes and scales, and (quantized here
// after the move) the staging the engine filled, of the source's dtype and the codes' shape.
struct QuantizeLocal {
  Tensor staging, codes, scales;
  std::vector<QuantizeView> views;
};
struct QuantizeStep {
  QuantizedDestination spec;
  int64_t grid_offset = 0;  // per tensor: its scale's entry
  std::vector<QuantizeLocal> locals;
};

// This rank's quantized leaves (LowerLocals makes them, from a lowering that is the same
// on every rank): the steps, the sources and their grid of amaxes (as ordered int32 bits)
// and scales (as stored, e8m0 ones widened). `on_senders`: the senders quantize (the wire
// carries codes; SenderScales before each move), else each rank after it (FinishQuantized
// from its staging).
struct QuantizeWork {
  std::vector<QuantizedDestination> specs;  // the lowering's
  std::vector<QuantizeStep> steps;
  std::vector<QuantizedSource> sources;
  std::vector<int32_t> amax;
  std::vector<float> scales;
  // The scales on the senders' device when it is not the CPU (their packing reads them
  // there): float32, as many as `scales`, rewritten by SenderScales.
  Tensor device_scales;
  bool on_senders = false;
  bool per_tensor = false;  // any destination with one scale per tensor
  bool any() const { return !sources.empty() || !steps.empty(); }
};

// Before a move that quantizes on the senders: each source's amax per tile over what this
// rank holds of it (`locals_of(source)`: its local tensors with their global offsets), the
// largest of every rank's by one all-reduce over `comm` (every rank alike), and the scales.
using SourceLocals = std::function<absl::StatusOr<std::vector<std::pair<Tensor, IntVector>>>(
    const QuantizedSource& source)>;
absl::Status SenderScales(QuantizeWork& work, const SourceLocals& locals_of, Communicator& comm);

// After a move: on the senders' side, every local's scales written from the grid; else the
// scales of whole tensors agreed by one all-reduce over `comm` (every rank alike, when
// work.per_tensor; `comm` is then not null) and every local's codes and scales made from its
// staging. Blocks no view covers: scale 1, their codes left as they are (zero for a pad).
// The all-reduce's errors and the device's.
absl::Status FinishQuantized(QuantizeWork& work, Communicator* comm);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_QUANTIZE_H_
