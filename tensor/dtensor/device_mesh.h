// DeviceMesh: an N-d array of global ranks (row-major), with optional dim names, as
// torch.distributed.device_mesh.DeviceMesh lays it out. Pure layout: binding a mesh to
// communicators (one per mesh dim) is comm/'s job.
#ifndef SDRT_TENSOR_DTENSOR_DEVICE_MESH_H_
#define SDRT_TENSOR_DTENSOR_DEVICE_MESH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/shape.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// The most ranks a DeviceMesh may have: 2^20 (over a million, far beyond any job), checked
// before anything is allocated so that a hostile `--mesh 3000000000` is an error, not an
// allocation failure.
inline constexpr int64_t kMaxMeshRanks = int64_t{1} << 20;

class DeviceMesh {
 public:
  // A mesh of `shape` over `ranks` (row-major; empty means 0..N-1). `dim_names`, when
  // given, has one distinct name per dim. `device_type` is "cpu" or "cuda".
  // InvalidArgument for empty or non-positive shapes, a product(shape) above kMaxMeshRanks
  // (computed without overflow, checked before any allocation), a rank count !=
  // product(shape), a negative rank, duplicate ranks or names.
  static absl::StatusOr<DeviceMesh> Create(IntSpan shape, std::vector<int64_t> ranks = {},
                                           std::vector<std::string> dim_names = {},
                                           std::string device_type = "cpu");
  // "2x2", "4", "2x2x2" over ranks 0..N-1.
  static absl::StatusOr<DeviceMesh> FromString(absl::string_view shape,
                                               std::string device_type = "cpu");

  const IntVector& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int mesh_dim) const { return shape_[mesh_dim]; }
  int64_t num_ranks() const { return static_cast<int64_t>(ranks_.size()); }
  const std::vector<int64_t>& ranks() const { return ranks_; }
  // The largest of ranks() (a communicator of fewer ranks cannot hold the mesh).
  int64_t max_rank() const { return max_rank_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  const std::string& device_type() const { return device_type_; }

  // Index of `rank` in the mesh, or nullopt when the rank is not in it.
  std::optional<IntVector> Coordinate(int64_t rank) const;
  // The global rank at `coordinate`.
  int64_t RankAt(IntSpan coordinate) const;

  // "DeviceMesh(cpu, 2x2, ranks=[0, 1, 2, 3], names=[dp, tp])"; past 16 ranks only the
  // first 16 are listed, then "..." and the count: "ranks=[0, 1, ..., 15, ... (64 ranks)]".
  std::string ToString() const;

  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    return a.shape_ == b.shape_ && a.ranks_ == b.ranks_ && a.dim_names_ == b.dim_names_ &&
           a.device_type_ == b.device_type_;
  }
  friend bool operator!=(const DeviceMesh& a, const DeviceMesh& b) { return !(a == b); }

 private:
  // The position of `rank` in ranks_, or -1: arithmetic when the ranks are consecutive
  // (the common mesh), else a binary search of by_rank_.
  int64_t IndexOf(int64_t rank) const;

  IntVector shape_;
  std::vector<int64_t> ranks_;
  std::vector<std::string> dim_names_;
  std::string device_type_;
  // Derived from ranks_ by Create: consecutive_ when ranks_[i] == ranks_[0] + i for every
  // i; else (rank, position) pairs sorted by rank.
  bool consecutive_ = false;
  std::vector<std::pair<int64_t, int64_t>> by_rank_;
  int64_t max_rank_ = 0;
};

}  // namespace sdrt

#endif  // SDRT_TENSOR_DTENSOR_DEVICE_MESH_H_
