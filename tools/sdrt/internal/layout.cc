// RenderLayout and LayoutJson (layout.h): each rank's owned runs (OwnedRuns), then the
// table and the picture drawn from them.
#include "sdrt/tools/sdrt/internal/layout.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

struct RankPiece {
  int64_t rank = 0;
  IntVector coordinate;
  IntVector local_shape;
  internal::ShardRuns runs;  // per dim, global runs
};

absl::StatusOr<std::vector<RankPiece>> Pieces(const TensorLayout& layout, const DeviceMesh& mesh) {
  std::vector<RankPiece> pieces;
  for (int64_t r = 0; r < mesh.num_ranks(); ++r) {
    const int64_t rank = mesh.ranks()[static_cast<size_t>(r)];
    absl::StatusOr<LocalShardInfo> info =
        ComputeLocalShapeAndGlobalOffset(layout.shape, mesh, layout.placements, rank);
    if (!info.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", layout.name, "': ", info.status().message()));
    }
    RankPiece piece;
    piece.rank = rank;
    piece.coordinate = *mesh.Coordinate(rank);
    piece.local_shape = info->local_shape;
    piece.runs = internal::OwnedRuns(*info);
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

std::string Interval(int64_t begin, int64_t end) {
  return absl::StrCat("[", begin, ", ", end, ")");
}

// "[0, 4) [8, 12)", or "none" for a dim with nothing owned.
std::string RunsText(const internal::IndexRuns& runs) {
  std::vector<std::string> parts;
  for (const internal::IndexRun& run : runs) {
    if (run.length > 0) parts.push_back(Interval(run.global, run.global + run.length));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, " ");
}

std::string Header(const TensorLayout& layout, const DeviceMesh& mesh, int64_t world_size) {
  // A mesh over other ranks than 0..N-1, or over fewer than the world's (a pipeline stage's,
  // an expert's), lists them.
  std::string ranks;
  const std::vector<int64_t>& r = mesh.ranks();
  const bool part = world_size > static_cast<int64_t>(r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] == static_cast<int64_t>(i) && !part) continue;
    const size_t shown = std::min<size_t>(r.size(), 16);
    ranks = absl::StrCat(" of ranks ", absl::StrJoin(r.begin(), r.begin() + shown, ", "),
                         shown < r.size() ? absl::StrCat(", ... (", r.size(), " ranks)") : "");
    break;
  }
  const std::string names = mesh.dim_names().empty()
                                ? ""
                                : absl::StrCat(" (", absl::StrJoin(mesh.dim_names(), ", "), ")");
  return absl::StrCat("tensor ", Printable(layout.name), ": ", DTypeName(layout.dtype), " ",
                      ShapeToString(layout.shape), " on mesh ", ShapeToString(mesh.shape()),
                      Printable(names), ranks, ", placements ",
                      PlacementsToString(layout.placements), "\n");
}

// Every run boundary of `dim` over all ranks, with 0 and the dim's size.
std::vector<int64_t> Cuts(const std::vector<RankPiece>& pieces, int dim, int64_t size) {
  std::set<int64_t> cuts = {0, size};
  for (const RankPiece& p : pieces) {
    for (const internal::IndexRun& run : p.runs[static_cast<size_t>(dim)]) {
      if (run.length == 0) continue;
      cuts.insert(run.global);
      cuts.insert(run.global + run.length);
    }
  }
  return std::vector<int64_t>(cuts.begin(), cuts.end());
}

bool Owns(const internal::IndexRuns& runs, int64_t begin, int64_t end) {
  for (const internal::IndexRun& run : runs) {
    if (run.length > 0 && run.global <= begin && end <= run.global + run.length) return true;
  }
  return false;
}

// The picture of a 1-D or 2-D tensor: rows are dim 0's cells (one row for 1-D), columns
// dim 1's; each cell lists the ranks that hold it.
void Picture(const TensorLayout& layout, const std::vector<RankPiece>& pieces, std::ostream& out) {
  const int ndim = static_cast<int>(layout.shape.size());
  const std::vector<int64_t> rows =
      ndim == 2 ? Cuts(pieces, 0, layout.shape[0]) : std::vector<int64_t>{0, 1};
  const int col_dim = ndim == 2 ? 1 : 0;
  const std::vector<int64_t> cols = Cuts(pieces, col_dim, layout.shape[col_dim]);
  const int64_t n_rows = static_cast<int64_t>(rows.size()) - 1;
  const int64_t n_cols = static_cast<int64_t>(cols.size()) - 1;
  if (n_rows > kMaxLayoutCells || n_cols > kMaxLayoutCells) {
    out << "\n(no picture: " << n_rows << " x " << n_cols << " cells, more than " << kMaxLayoutCells
        << " on a dim; the table has every rank)\n";
    return;
  }
  if (n_rows < 1 || n_cols < 1) return;  // a dim of size 0: nothing to draw
  std::vector<std::string> header = {ndim == 2 ? "dim 0 \\ dim 1" : "dim 0"};
  for (int64_t c = 0; c < n_cols; ++c) header.push_back(Interval(cols[c], cols[c + 1]));
  Table table(header, std::vector<bool>(header.size(), false));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::vector<std::string> row = {ndim == 2 ? Interval(rows[r], rows[r + 1]) : "ranks"};
    for (int64_t c = 0; c < n_cols; ++c) {
      std::vector<int64_t> holders;
      for (const RankPiece& p : pieces) {
        const bool row_ok = ndim == 1 || Owns(p.runs[0], rows[r], rows[r + 1]);
        if (row_ok && Owns(p.runs[static_cast<size_t>(col_dim)], cols[c], cols[c + 1])) {
          holders.push_back(p.rank);
        }
      }
      // A cell that a whole world holds lists its first ranks and the count.
      constexpr size_t kMaxListed = 16;
      const size_t listed = std::min(holders.size(), kMaxListed);
      row.push_back(
          holders.empty()
              ? "-"
              : absl::StrCat(absl::StrJoin(holders.begin(), holders.begin() + listed, ","),
                             listed < holders.size()
                                 ? absl::StrCat(",... (", holders.size(), " ranks)")
                                 : ""));
    }
    table.AddRow(std::move(row));
  }
  out << "\n";
  table.Print(out);
}

// A layout needs the tensors' names and shapes only: header-only descriptions open too.
CheckpointSource::Options HeaderOnlyToo() {
  CheckpointSource::Options options;
  options.file_options.accept_header_only = true;
  return options;
}

// FindLayout of a checkpoint source under a parallel layout description: the tensor's own
// mesh and placements among all of the source's tensors; `mesh_spec`, when given, is the
// world size.
absl::StatusOr<FoundLayout> FindInParallelLayout(const std::string& path, const std::string& name,
                                                 const std::string& mesh_spec,
                                                 const std::string& plan_spec) {
  SDRT_ASSIGN_OR_RETURN(ParallelLayout layout, ParseParallelLayout(mesh_spec, plan_spec));
  SDRT_ASSIGN_OR_RETURN(CheckpointSource source, CheckpointSource::Open(path, HeaderOnlyToo()));
  const std::vector<SafetensorsTensorSpec> specs = source.TensorSpecs();
  SDRT_ASSIGN_OR_RETURN(std::vector<LaidOutTensor> placed, layout.Place(specs));
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name != name) continue;
    FoundLayout found;
    found.layout = {name, specs[i].dtype, specs[i].shape, std::move(placed[i].placements)};
    found.mesh = std::move(placed[i].mesh);
    found.world_size = layout.world_size();
    return found;
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " has no tensor '", name, "'"));
}

}  // namespace

absl::StatusOr<FoundLayout> FindLayout(const std::string& path, const std::string& name,
                                       const std::string& mesh_spec, const std::string& plan_spec) {
  absl::StatusOr<CheckpointKind> kind = DetectCheckpointKind(path);
  if (!kind.ok()) return kind.status();
  FoundLayout found;
  found.layout.name = name;
  if (*kind == CheckpointKind::kShardedFolder) {
    if (!mesh_spec.empty() || !plan_spec.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path,
          " is a sharded checkpoint: its index says the mesh and placements (drop --mesh "
          "and --plan)"));
    }
    absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(path);
    if (!index.ok()) return index.status();
    for (const ShardedCheckpointTensor& t : index->tensors) {
      if (t.name != name) continue;
      found.layout.dtype = t.dtype;
      found.layout.shape = t.shape;
      found.layout.placements = t.placements;
      found.mesh = index->mesh;
      return found;
    }
    return absl::InvalidArgumentError(absl::StrCat(path, " has no tensor '", name, "'"));
  }
  if (ParallelLayout::IsDescription(plan_spec)) {
    return FindInParallelLayout(path, name, mesh_spec, plan_spec);
  }
  if (mesh_spec.empty() || plan_spec.empty()) {
    return absl::InvalidArgumentError(
        "--layout of a checkpoint needs --mesh and --plan (how it would be laid out)");
  }
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path, HeaderOnlyToo());
  if (!source.ok()) return source.status();
  const CheckpointSourceTensor* t = source->Find(name);
  if (t == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(path, " has no tensor '", name, "'"));
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::FromString(mesh_spec);
  if (!mesh.ok()) return mesh.status();
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromSpec(plan_spec);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<Placement>> placements = plan->PlacementsFor(name, t->shape, *mesh);
  if (!placements.ok()) return placements.status();
  found.layout.dtype = t->dtype;
  found.layout.shape = t->shape;
  found.layout.placements = *std::move(placements);
  found.mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
  return found;
}

absl::StatusOr<std::string> RenderLayout(const TensorLayout& layout, const DeviceMesh& mesh,
                                         int64_t world_size) {
  absl::StatusOr<std::vector<RankPiece>> pieces = Pieces(layout, mesh);
  if (!pieces.ok()) return pieces.status();
  std::ostringstream out;
  out << Header(layout, mesh, world_size) << "\n";
  std::vector<std::string> header = {"rank", "mesh coordinate", "local shape"};
  for (size_t d = 0; d < layout.shape.size(); ++d) header.push_back(absl::StrCat("dim ", d));
  std::vector<bool> right(header.size(), false);
  right[0] = true;
  Table table(header, right);
  int64_t listed = 0;
  for (const RankPiece& p : *pieces) {
    if (listed++ == kMaxLayoutRanks) break;
    std::vector<std::string> row = {absl::StrCat(p.rank), ShapeToString(p.coordinate),
                                    ShapeToString(p.local_shape)};
    for (const internal::IndexRuns& runs : p.runs) row.push_back(RunsText(runs));
    table.AddRow(std::move(row));
  }
  table.Print(out);
  if (static_cast<int64_t>(pieces->size()) > kMaxLayoutRanks) {
    out << "(" << pieces->size() - kMaxLayoutRanks << " more ranks; --json lists every rank)\n";
  }
  if (layout.shape.size() == 1 || layout.shape.size() == 2) Picture(layout, *pieces, out);
  // Drawn all the same, but said: a sub-byte piece cut inside a byte is refused by every
  // command that moves it.
  if (IsSubByte(layout.dtype)) {
    const absl::Status whole = internal::CheckShardingCutsWholeBytes(
        layout.name, layout.dtype, layout.shape, mesh, layout.placements);
    if (!whole.ok()) out << "\nrefused by load, shard and reshard: " << whole.message() << "\n";
  }
  return out.str();
}

absl::StatusOr<nlohmann::ordered_json> LayoutJson(const TensorLayout& layout,
                                                  const DeviceMesh& mesh) {
  absl::StatusOr<std::vector<RankPiece>> pieces = Pieces(layout, mesh);
  if (!pieces.ok()) return pieces.status();
  nlohmann::ordered_json out;
  out["tensor"] = layout.name;
  out["dtype"] = std::string(DTypeName(layout.dtype));
  out["shape"] = std::vector<int64_t>(layout.shape.begin(), layout.shape.end());
  out["mesh"] = std::vector<int64_t>(mesh.shape().begin(), mesh.shape().end());
  out["mesh_dim_names"] = mesh.dim_names();
  out["mesh_ranks"] = mesh.ranks();
  out["placements"] = PlacementsToString(layout.placements);
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankPiece& p : *pieces) {
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const internal::IndexRuns& dim : p.runs) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const internal::IndexRun& run : dim) {
        if (run.length > 0) list.push_back({run.global, run.global + run.length});
      }
      runs.push_back(std::move(list));
    }
    ranks.push_back(
        {{"rank", p.rank},
         {"coordinate", std::vector<int64_t>(p.coordinate.begin(), p.coordinate.end())},
         {"local_shape", std::vector<int64_t>(p.local_shape.begin(), p.local_shape.end())},
         {"runs", std::move(runs)}});
  }
  out["ranks"] = std::move(ranks);
  return out;
}

}  // namespace sdrt::cli
