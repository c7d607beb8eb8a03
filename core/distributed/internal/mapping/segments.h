// Where a fused tensor holds its components along the rule's dim (weight_map.h's
// interleaves), as segments: the one arithmetic of fuse, split and pad, shared by the
// lowering (lowering.h) and WeightMap::DestinationTensors. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_SEGMENTS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_SEGMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/weight_map.h"

namespace sdrt::internal {

// Fused elements [fused, fused + length) along the dim are component `component`'s
// [offset, offset + length).
struct FusedSegment {
  int component = 0;
  int64_t fused = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

// The fused tensor's size along the dim for components of `rows` (their sizes along it):
// a pad's the source's rounded up to the multiple; kGroups the sum; kShards `parts` times
// what one part holds (each component's rows over the parts, by whole heads with a head
// size, one head on parts / heads parts when there are fewer heads than parts).
// InvalidArgument prefixed by `where`: rows that are not whole heads, groups or parts that
// do not divide them, a part of nothing, more than 2^20 segments.
absl::StatusOr<int64_t> FusedSize(const WeightMapRule& rule, const std::vector<int64_t>& rows,
                                  int64_t parts, const std::string& where);

// The segments of a fused tensor of `size` along the dim (FusedSize's, else InvalidArgument
// naming both), in fused order: per part (kShards) or group (kGroups) each component's piece.
absl::StatusOr<std::vector<FusedSegment>> FusedSegments(const WeightMapRule& rule,
                                              const std::vector<int64_t>& rows, int64_t size,
                                              int64_t parts, const std::string& where);

// `rule` counted in blocks of `tile` rows (FP8 block scales fused like their codes): its
// head size and sizes over the tile, with `rows` (the components' sizes along the dim, in
// rows) over it into `block_rows`; InvalidArgument prefixed by `where` when one of them is
// not whole blocks.
absl::StatusOr<WeightMapRule> InBlocks(const WeightMapRule& rule, int64_t tile,
                                       const std::vector<int64_t>& rows,
                                       std::vector<int64_t>& block_rows, const std::string& where);

// A regroup's source side as the rule FusedSize and FusedSegments read (its interleave the
// source's); the rule itself describes its destination side.
WeightMapRule SourceSideOf(const WeightMapRule& regroup);

// Component `component`'s segments with each of its elements once: where kShards
// replicates its heads over several parts, the first part that holds them.
std::vector<FusedSegment> FirstOfEach(const std::vector<FusedSegment>& segments, int component);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_SEGMENTS_H_
