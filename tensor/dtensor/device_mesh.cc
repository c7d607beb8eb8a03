#include "sdrt/tensor/dtensor/device_mesh.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sdrt {

absl::StatusOr<DeviceMesh> DeviceMesh::Create(IntSpan shape, std::vector<int64_t> ranks,
                                              std::vector<std::string> dim_names,
                                              std::string device_type) {
  if (shape.empty()) return absl::InvalidArgumentError("DeviceMesh: empty shape");
  int64_t total = 1;
  for (int64_t s : shape) {
    if (s <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceMesh: shape ", ShapeToString(shape), " has a non-positive dim"));
    }
    if (s > kMaxMeshRanks / total) {  // total * s > kMaxMeshRanks, without overflow
      return absl::InvalidArgumentError(absl::StrCat("DeviceMesh: shape ", ShapeToString(shape),
                                                     " has more than ", kMaxMeshRanks,
                                                     " ranks (2^20, the most a mesh may have)"));
    }
    total *= s;
  }
  if (ranks.empty()) {
    for (int64_t r = 0; r < total; ++r) ranks.push_back(r);
  }
  if (static_cast<int64_t>(ranks.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMesh: shape ", ShapeToString(shape),
                                                   " needs ", total, " ranks, got ", ranks.size()));
  }
  const std::set<int64_t> distinct(ranks.begin(), ranks.end());
  if (*distinct.begin() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceMesh: rank ", *distinct.begin(), " is negative"));
  }
  if (distinct.size() != ranks.size()) {
    return absl::InvalidArgumentError("DeviceMesh: duplicate ranks");
  }
  if (!dim_names.empty() &&
      (dim_names.size() != shape.size() ||
       std::set<std::string>(dim_names.begin(), dim_names.end()).size() != dim_names.size())) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMesh: need ", shape.size(),
                                                   " distinct dim names, got [",
                                                   absl::StrJoin(dim_names, ", "), "]"));
  }
  DeviceMesh mesh;
  mesh.shape_.assign(shape.begin(), shape.end());
  mesh.ranks_ = std::move(ranks);
  mesh.dim_names_ = std::move(dim_names);
  mesh.device_type_ = std::move(device_type);
  mesh.max_rank_ = *distinct.rbegin();
  mesh.consecutive_ = true;
  for (size_t i = 0; i < mesh.ranks_.size() && mesh.consecutive_; ++i) {
    mesh.consecutive_ = mesh.ranks_[i] == mesh.ranks_.front() + static_cast<int64_t>(i);
  }
  if (!mesh.consecutive_) {
    mesh.by_rank_.reserve(mesh.ranks_.size());
    for (size_t i = 0; i < mesh.ranks_.size(); ++i) {
      mesh.by_rank_.emplace_back(mesh.ranks_[i], static_cast<int64_t>(i));
    }
    std::sort(mesh.by_rank_.begin(), mesh.by_rank_.end());
  }
  return mesh;
}

absl::StatusOr<DeviceMesh> DeviceMesh::FromString(absl::string_view shape,
                                                  std::string device_type) {
  IntVector dims;
  for (absl::string_view part : absl::StrSplit(shape, 'x')) {
    int64_t d = 0;
    // Digits only: SimpleAtoi alone also takes " 2", "+2" and "2\n".
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits || !absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceMesh: cannot parse mesh shape '", shape, "' (want e.g. 2x2)"));
    }
    dims.push_back(d);
  }
  return Create(dims, {}, {}, std::move(device_type));
}

int64_t DeviceMesh::IndexOf(int64_t rank) const {
  if (consecutive_) {
    const int64_t i = rank - ranks_.front();
    return i >= 0 && i < num_ranks() ? i : -1;
  }
  const auto it = std::lower_bound(by_rank_.begin(), by_rank_.end(),
                                   std::pair<int64_t, int64_t>(rank, 0));
  return it != by_rank_.end() && it->first == rank ? it->second : -1;
}

std::optional<IntVector> DeviceMesh::Coordinate(int64_t rank) const {
  const int64_t i = IndexOf(rank);
  if (i < 0) return std::nullopt;
  IntVector coord(shape_.size());
  int64_t rest = i;
  for (int d = ndim() - 1; d >= 0; --d) {
    coord[d] = rest % shape_[d];
    rest /= shape_[d];
  }
  return coord;
}

int64_t DeviceMesh::RankAt(IntSpan coordinate) const {
  int64_t index = 0;
  for (int d = 0; d < ndim(); ++d) index = index * shape_[d] + coordinate[d];
  return ranks_[index];
}

std::string DeviceMesh::ToString() const {
  constexpr size_t kListed = 16;
  std::string out =
      absl::StrCat("DeviceMesh(", device_type_, ", ", absl::StrJoin(shape_, "x"), ", ranks=[");
  if (ranks_.size() <= kListed) {
    absl::StrAppend(&out, absl::StrJoin(ranks_, ", "), "]");
  } else {
    absl::StrAppend(&out, absl::StrJoin(ranks_.begin(), ranks_.begin() + kListed, ", "), ", ... (",
                    ranks_.size(), " ranks)]");
  }
  if (!dim_names_.empty()) absl::StrAppend(&out, ", names=[", absl::StrJoin(dim_names_, ", "), "]");
  return out + ")";
}

}  // namespace sdrt
