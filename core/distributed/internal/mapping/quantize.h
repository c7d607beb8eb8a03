// FP8 destinations of a weight map (issue 30; docs/PLAN.md, "FP8 with scales"): a
// destination leaf of float8_e4m3fn or float8_e5m2 codes next to a companion leaf of its
// scales, named as the leaf plus "_scale_inv" (one scale per 128 x 128 block of each source
// tensor, DeepSeek-V3's weight_scale_inv) or plus "_scale" (one for the whole tensor),
// float32 or float8_e8m0fnu. The recipe is fp8_scale.h's (PyTorch's, bit for bit).
//
// How it is lowered: the codes leaf is lowered as any destination (lowering.h), fused,
// padded or as it is, but its views go into staging locals of the source's dtype and the
// codes leaf's local shapes, made once per call or binding; the engine moves the source's
// bytes into them uncast; then each rank quantizes what it holds into the codes and writes
// the scales (FinishQuantized). With whole blocks on every rank (checked at planning: every
// piece of a block-quantized tensor starts at a multiple of 128 in the source and in its
// local) a block's scale needs nothing from a peer; a tensor's scale is the largest
// magnitude over every rank (one all-reduce of every per-tensor amax). The wire carries the
// source's dtype; sending codes (the wire in fp8) is the next step of the issue. CPU
// destinations only for now. Not public API.
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

// Whether any rank describes a destination leaf of an fp8 code dtype (the lowering then
// looks for its scales).
bool HasCodeLeaves(const std::vector<std::vector<LeafLayout>>& per_rank);
// Whether `tree` holds a tensor leaf of an fp8 code dtype.
bool HasCodeLeaves(const Map& tree);

// The quantized destinations among the destination leaves (`find(path)`: the first rank's
// description of the destination leaf `path`, or null): every leaf of an fp8 code dtype
// with a companion ("_scale_inv" looked for first), in path order. InvalidArgument naming
// the leaf: a companion of another dtype than float32 / float8_e8m0fnu, block scales for a
// tensor that is not 2-D.
absl::StatusOr<std::vector<QuantizedDestination>> FindQuantizedDestinations(
    const std::vector<const LeafLayout*>& destinations,
    const std::function<const LeafLayout*(const std::string&)>& find);

// Checks a lowered destination whose views go into a quantized leaf, on every rank alike:
// `source_dtype` quantizes (float32, bfloat16, float16), the fused dim is 0 and the tensor
// 2-D, and with block scales every box starts at a multiple of the block in the source on
// both dims and its view at one in its local (`boxes` and `view_starts`, one per box).
// InvalidArgument prefixed by `where` otherwise.
absl::Status CheckQuantizedBoxes(const QuantizedDestination& q, DType source_dtype, int dim,
                                 const std::vector<TransferBox>& boxes,
                                 const std::vector<int64_t>& view_starts, const std::string& where);

// One local of a quantized leaf on this rank: what the engine filled (`staging`, of the
// source's dtype and the codes' shape, rows [start, start + length) of it in views), and
// where the codes and scales go.
struct QuantizeLocal {
  Tensor staging, codes, scales;
  std::vector<std::pair<int64_t, int64_t>> rows;  // (start, length) along dim 0
};
struct QuantizeStep {
  QuantizedDestination spec;
  int slot = 0;  // the destination's index in MapLowering::quantized
  std::vector<QuantizeLocal> locals;
};

// This rank's quantized leaves (LowerLocals makes them): the steps, and of the lowering
// (the same on every rank) how many destinations it quantizes and whether any is per tensor.
struct QuantizeWork {
  std::vector<QuantizeStep> steps;
  int64_t destinations = 0;
  bool per_tensor = false;
};

// After a move: the scales of whole tensors agreed by one all-reduce over `comm` (every
// rank alike, when work.per_tensor; `comm` is then not null), then every local's codes and scales written from its
// staging (blocks no view covers: scale 1, their codes left as they are: zero for a pad).
// The all-reduce's errors.
absl::Status FinishQuantized(const QuantizeWork& work, Communicator* comm);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_QUANTIZE_H_
