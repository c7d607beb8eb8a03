#include "sdrt/tensor/sharding/byte_cuts.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

bool WholeBytes(int64_t elements, int bits) { return (elements * bits) % 8 == 0; }

// "tensor 'w' (float4_e2m1fn_x2 [4, 8])".
std::string Describe(absl::string_view name, DType dtype, IntSpan shape) {
  const std::string what =
      absl::StrCat("(", DTypeName(dtype), " [", absl::StrJoin(shape, ", "), "])");
  return name.empty() ? absl::StrCat("tensor ", what) : absl::StrCat("tensor '", name, "' ", what);
}

// "a 4-bit element cannot be cut inside a byte".
std::string Rule(DType dtype) {
  return absl::StrCat("a ", ElementBits(dtype), "-bit element cannot be cut inside a byte");
}

// " along dim 1" for the innermost dim, else " along dim 0 (each index of dim 0 holds 3
// elements)".
std::string AlongDim(IntSpan shape, int dim) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  if (dim + 1 == static_cast<int>(shape.size())) return absl::StrCat(" elements along dim ", dim);
  return absl::StrCat(" along dim ", dim, " (each index of dim ", dim, " holds ", inner,
                      " elements)");
}

}  // namespace

int FirstSubByteCut(DType dtype, IntSpan shape, const ShardRuns& runs) {
  if (!IsSubByte(dtype) || RunsNumel(runs) == 0) return -1;
  const int bits = ElementBits(dtype);
  const int n = static_cast<int>(shape.size());
  // The last dim not kept whole; the dims after it are whole, so each kept run of it is
  // one run of adjacent elements.
  int j = -1;
  for (int d = n - 1; d >= 0; --d) {
    const auto& rd = runs[d];
    if (!(rd.size() == 1 && rd[0].global == 0 && rd[0].length == shape[d])) {
      j = d;
      break;
    }
  }
  if (j < 0) return -1;  // the whole tensor
  int64_t inner = 1;
  for (int d = n - 1; d > j; --d) inner *= shape[d];
  std::vector<int64_t> inners(static_cast<size_t>(j) + 1);
  for (int d = j; d >= 0; --d) {
    inners[d] = inner;
    inner *= shape[d];
  }
  for (int d = 0; d <= j; ++d) {
    for (const IndexRun& r : runs[d]) {
      if (r.length == 0) continue;
      if (!WholeBytes(r.global * inners[d], bits)) return d;
      if (d < j && r.length > 1 && !WholeBytes(inners[d], bits)) return d;
      if (d == j && !WholeBytes(r.length * inners[d], bits)) return d;
    }
  }
  return -1;
}

absl::Status CheckShardingCutsWholeBytes(absl::string_view name, DType dtype, IntSpan shape,
                                         const DeviceMesh& mesh,
                                         const std::vector<Placement>& placements) {
  if (!IsSubByte(dtype)) return absl::OkStatus();
  std::vector<LocalShardInfo> infos;
  int cut = -1;
  for (int64_t rank : mesh.ranks()) {
    SDRT_ASSIGN_OR_RETURN(LocalShardInfo info,
                          ComputeLocalShapeAndGlobalOffset(shape, mesh, placements, rank));
    if (cut < 0) cut = FirstSubByteCut(dtype, shape, OwnedRuns(info));
    infos.push_back(std::move(info));
  }
  if (cut < 0) return absl::OkStatus();
  std::vector<int64_t> sizes;
  for (const LocalShardInfo& info : infos) sizes.push_back(info.local_shape[cut]);
  const bool one_shard = mesh.ndim() == 1 && placements[0].kind() == Placement::Kind::kShard;
  const std::string how =
      one_shard ? absl::StrCat("Shard(", placements[0].dim(), ") over ", mesh.num_ranks(), " ranks")
                : absl::StrCat(PlacementsToString(placements), " over mesh ",
                               absl::StrJoin(mesh.shape(), "x"));
  return absl::InvalidArgumentError(absl::StrCat(Describe(name, dtype, shape), ": ", how,
                                                 " gives pieces of ", absl::StrJoin(sizes, ", "),
                                                 AlongDim(shape, cut), "; ", Rule(dtype)));
}

absl::Status CheckBoxCutsWholeBytes(absl::string_view name, DType dtype, IntSpan shape,
                                    IntSpan offsets, IntSpan sizes) {
  const int cut = FirstSubByteCut(dtype, shape, BoxRuns(offsets, sizes));
  if (cut < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(Describe(name, dtype, shape), ": the shard at offsets [",
                   absl::StrJoin(offsets, ", "), "] with sizes [", absl::StrJoin(sizes, ", "),
                   "] is cut inside a byte on dim ", cut, "; ", Rule(dtype)));
}

}  // namespace sdrt::internal
