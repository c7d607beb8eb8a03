// sdrt/c_api.h: a model's tensors placed under a parallel layout description
// (ParallelLayout, core/checkpoint/parallel_layout.h), as DTensor specs a C engine adds its
// buffers with.
#include "sdrt/core/checkpoint/parallel_layout.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

// The most tensors and dims one call takes (a 1T-parameter MoE has about 100,000 tensors).
constexpr int64_t kMaxLayoutTensors = int64_t{1} << 24;
constexpr int32_t kMaxLayoutDims = 64;

// What the last sdrt_parallel_layout_place on this thread handed out: each distinct mesh's
// shape and ranks once, each distinct placements string once.
struct LayoutStorage {
  struct Mesh {
    std::vector<int64_t> shape;
    std::vector<int64_t> ranks;
  };
  std::vector<std::unique_ptr<Mesh>> meshes;
  std::vector<std::unique_ptr<std::string>> placements;
};

LayoutStorage& Storage() { return c_api::ThreadStorage<LayoutStorage>(); }

}  // namespace

extern "C" {

sdrt_status_t sdrt_parallel_layout_place(const char* description, int64_t world_size,
                                         int64_t first_rank, int64_t count,
                                         const char* const* names, const int32_t* ndims,
                                         const int64_t* const* shapes, sdrt_dtensor_spec_t* specs) {
  return Guard("sdrt_parallel_layout_place", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(description, "description"));
    if (count < 0 || count > kMaxLayoutTensors) {
      return absl::InvalidArgumentError(
          absl::StrCat("count ", count, " is not in [0, ", kMaxLayoutTensors, "]"));
    }
    if (count > 0) {
      SDRT_RETURN_IF_ERROR(c_api::NotNull(names, "names"));
      SDRT_RETURN_IF_ERROR(c_api::NotNull(ndims, "ndims"));
      SDRT_RETURN_IF_ERROR(c_api::NotNull(shapes, "shapes"));
      SDRT_RETURN_IF_ERROR(c_api::NotNull(specs, "specs"));
    }
    std::vector<sdrt::SafetensorsTensorSpec> tensors(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const std::string which = absl::StrCat("tensor ", i);
      SDRT_RETURN_IF_ERROR(c_api::NotNull(names[i], absl::StrCat(which, "'s name").c_str()));
      SDRT_RETURN_IF_ERROR(
          c_api::CheckStructSize(&specs[i], absl::StrCat("specs[", i, "]").c_str()));
      if (ndims[i] < 0 || ndims[i] > kMaxLayoutDims) {
        return absl::InvalidArgumentError(absl::StrCat(which, " ('", names[i], "'): ndims ",
                                                       ndims[i], " is not in [0, ", kMaxLayoutDims,
                                                       "]"));
      }
      if (ndims[i] > 0 && shapes[i] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(which, " ('", names[i], "'): shapes[", i, "] is NULL"));
      }
      sdrt::SafetensorsTensorSpec& t = tensors[static_cast<size_t>(i)];
      t.name = names[i];
      for (int32_t d = 0; d < ndims[i]; ++d) {
        if (shapes[i][d] < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(which, " ('", names[i], "'): a negative size"));
        }
        t.shape.push_back(shapes[i][d]);
      }
    }
    SDRT_ASSIGN_OR_RETURN(const sdrt::ParallelLayout layout,
                          sdrt::ParallelLayout::Parse(description, world_size));
    SDRT_ASSIGN_OR_RETURN(const std::vector<sdrt::LaidOutTensor> placed,
                          layout.Place(tensors, first_rank));
    // Only now, every tensor placed: the storage of the previous call is replaced.
    LayoutStorage storage;
    absl::flat_hash_map<const sdrt::DeviceMesh*, const LayoutStorage::Mesh*> meshes;
    absl::flat_hash_map<std::string, const std::string*> strings;
    for (int64_t i = 0; i < count; ++i) {
      const sdrt::LaidOutTensor& home = placed[static_cast<size_t>(i)];
      const LayoutStorage::Mesh*& mesh = meshes[home.mesh.get()];
      if (mesh == nullptr) {
        auto made = std::make_unique<LayoutStorage::Mesh>();
        made->shape.assign(home.mesh->shape().begin(), home.mesh->shape().end());
        made->ranks = home.mesh->ranks();
        mesh = made.get();
        storage.meshes.push_back(std::move(made));
      }
      std::string text = sdrt::PlacementsToString(home.placements);
      const std::string*& placements = strings[text];
      if (placements == nullptr) {
        storage.placements.push_back(std::make_unique<std::string>(std::move(text)));
        placements = storage.placements.back().get();
      }
      sdrt_dtensor_spec_t& spec = specs[i];
      spec.mesh_ndim = static_cast<int32_t>(mesh->shape.size());
      spec.mesh_shape = mesh->shape.data();
      spec.mesh_ranks = mesh->ranks.data();
      spec.placements = placements->c_str();
      spec.global_ndim = ndims[i];
      spec.global_shape = ndims[i] > 0 ? shapes[i] : nullptr;
    }
    Storage() = std::move(storage);
    return absl::OkStatus();
  });
}

}  // extern "C"
