// `sdrt inspect ... --layout NAME`: which rank holds which rows and columns of one tensor,
// as a table (every rank: mesh coordinate, local shape, the global index runs it owns on
// each dim) and, for 1-D and 2-D tensors, a small picture of the tensor cut at every run
// boundary with the ranks holding each cell, as PyTorch's visualize_sharding draws a
// DTensor (torch.distributed.tensor.debug), in text.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_LAYOUT_H_
#define SDRT_TOOLS_SDRT_INTERNAL_LAYOUT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/shape.h"

namespace sdrt::cli {

// One tensor's placement on a mesh.
struct TensorLayout {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;  // global shape, elements
  std::vector<Placement> placements;  // one per mesh dim
};

// Where `FindLayout` found the tensor: its layout and the mesh it is laid out on.
struct FoundLayout {
  TensorLayout layout;
  std::shared_ptr<const DeviceMesh> mesh;
  int64_t world_size = 0;  // a parallel layout's ranks; 0: the mesh's
};

// The layout of tensor `name` in `path`: a sharded checkpoint folder's own (its index's
// mesh and placements; `mesh_spec` and `plan_spec` must be empty), or that of a checkpoint
// source (a safetensors file, a Hugging Face folder, a folder of safetensors files; header-only
// descriptions of `sdrt make --header-only` too) under
// `mesh_spec` ("2x2") and `plan_spec` (a built-in plan or a PLAN.json), both required, or
// under a parallel layout description (core/checkpoint/parallel_layout.h) as `plan_spec`,
// which gives the tensor its own mesh among all of the source's tensors (`mesh_spec`, then
// optional, is the world size). InvalidArgument naming what is missing or wrong (an unknown
// tensor, a mesh or plan given for a sharded folder or missing for a source, the plan's or
// the layout's errors); the opening errors of the folder or source.
absl::StatusOr<FoundLayout> FindLayout(const std::string& path, const std::string& name,
                                       const std::string& mesh_spec, const std::string& plan_spec);

// The picture is drawn only when each of its dims has at most this many cells; a cell lists
// at most 16 of the ranks holding it, then their count.
inline constexpr int kMaxLayoutCells = 16;
// The table lists at most this many ranks (then says how many it left out).
inline constexpr int64_t kMaxLayoutRanks = 64;

// The text described above, ending in a newline. InvalidArgument for placements that do
// not fit the mesh or the shape (ComputeLocalShapeAndGlobalOffset's errors, naming the
// tensor).
// The header names the mesh's ranks when they are not 0..N-1 or fewer than `world_size`
// (a pipeline stage's, an expert's).
absl::StatusOr<std::string> RenderLayout(const TensorLayout& layout, const DeviceMesh& mesh,
                                         int64_t world_size = 0);

// The same as JSON: {"tensor", "dtype", "shape", "mesh", "mesh_dim_names", "mesh_ranks",
// "placements", "ranks": [{"rank", "coordinate", "local_shape", "runs": per dim a list of
// [begin, end)}]} (every rank).
absl::StatusOr<nlohmann::ordered_json> LayoutJson(const TensorLayout& layout,
                                                  const DeviceMesh& mesh);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_LAYOUT_H_
