#include "sdrt/core/distributed/internal/engine/route_cache.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt::internal {
namespace {

// The words and name bytes a route depends on, hashed together.
class RouteKey {
 public:
  explicit RouteKey(size_t tensors) {
    words_.reserve(tensors * 24 + 16);
    names_.reserve(tensors * 32);
  }

  void Options(const TransferPlanOptions& plan, const TransferScheduleOptions& schedule) {
    Put(plan.rank);
    Put(plan.world_size);
    Put(plan.broadcast ? 1 : 0);
    Put(plan.all_gather ? 1 : 0);
    Put(plan.max_cells);
    Put(schedule.bucket_bytes);
    Put(static_cast<int64_t>(plan.node_of_rank.size()));
    for (int64_t node : plan.node_of_rank) Put(node);
  }

  void Tensor(const TransferTensor& t) {
    Put(static_cast<int64_t>(t.name.size()));
    names_.append(t.name);
    Put(static_cast<int64_t>(t.dtype) | (t.allow_uncovered ? int64_t{1} << 16 : 0));
    Put(static_cast<int64_t>(t.shape.size()));
    for (int64_t s : t.shape) Put(s);
    Side(t.source);
    Side(t.destination);
  }

  XXH128_hash_t Digest() const {
    XXH3_state_t* state = XXH3_createState();
    XXH3_128bits_reset(state);
    XXH3_128bits_update(state, words_.data(), words_.size() * sizeof(uint64_t));
    XXH3_128bits_update(state, names_.data(), names_.size());
    const XXH128_hash_t digest = XXH3_128bits_digest(state);
    XXH3_freeState(state);
    return digest;
  }

 private:
  void Put(int64_t v) { words_.push_back(static_cast<uint64_t>(v)); }

  void Side(const TransferLayout& side) {
    Put(side.mesh == nullptr ? 0 : static_cast<int64_t>(MeshHash(*side.mesh) | 1));
    Put(static_cast<int64_t>(side.placements.size()));
    for (const Placement& p : side.placements) {
      Put(static_cast<int64_t>(p.kind()) | static_cast<int64_t>(p.reduce_op()) << 8);
      Put(p.dim());
      Put(p.split_factor());
    }
    Put(static_cast<int64_t>(side.boxes.size()));
    for (const TransferBox& box : side.boxes) {
      Put(box.rank);
      Put(static_cast<int64_t>(box.offsets.size()));
      for (int64_t v : box.offsets) Put(v);
      Put(static_cast<int64_t>(box.sizes.size()));
      for (int64_t v : box.sizes) Put(v);
    }
  }

  // A mesh by its content (shape and ranks), computed once per mesh object.
  uint64_t MeshHash(const DeviceMesh& mesh) {
    if (&mesh == last_mesh_) return last_hash_;
    auto [it, fresh] = meshes_.try_emplace(&mesh, 0);
    if (fresh) {
      std::vector<uint64_t> content;
      content.push_back(mesh.shape().size());
      for (int64_t s : mesh.shape()) content.push_back(static_cast<uint64_t>(s));
      for (int64_t r : mesh.ranks()) content.push_back(static_cast<uint64_t>(r));
      it->second = XXH3_64bits(content.data(), content.size() * sizeof(uint64_t));
    }
    last_mesh_ = &mesh;
    last_hash_ = it->second;
    return last_hash_;
  }

  std::vector<uint64_t> words_;
  std::string names_;
  absl::flat_hash_map<const DeviceMesh*, uint64_t> meshes_;
  const DeviceMesh* last_mesh_ = nullptr;
  uint64_t last_hash_ = 0;
};

class RouteCache {
 public:
  std::shared_ptr<const TransferRoute> Find(const XXH128_hash_t& key) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (XXH128_isEqual(e.key, key)) {
        e.last_use = ++clock_;
        ++counts_.hits;
        return e.route;
      }
    }
    ++counts_.misses;
    return nullptr;
  }

  void Keep(const XXH128_hash_t& key, std::shared_ptr<const TransferRoute> route)
      ABSL_LOCKS_EXCLUDED(mu_) {
    const int64_t tensors = static_cast<int64_t>(route->plan.tensors.size());
    if (tensors > kMaxCachedTensors) return;
    absl::MutexLock lock(&mu_);
    for (const Entry& e : entries_) {
      if (XXH128_isEqual(e.key, key)) return;  // another thread made it meanwhile
    }
    int64_t kept = tensors;
    for (const Entry& e : entries_) kept += e.tensors;
    while (!entries_.empty() &&
           (static_cast<int>(entries_.size()) >= kMaxCachedRoutes || kept > kMaxCachedTensors)) {
      size_t oldest = 0;
      for (size_t i = 1; i < entries_.size(); ++i) {
        if (entries_[i].last_use < entries_[oldest].last_use) oldest = i;
      }
      kept -= entries_[oldest].tensors;
      entries_.erase(entries_.begin() + static_cast<ptrdiff_t>(oldest));
    }
    entries_.push_back({key, std::move(route), tensors, ++clock_});
  }

  RouteCacheCounts Counts() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return counts_;
  }

 private:
  struct Entry {
    XXH128_hash_t key;
    std::shared_ptr<const TransferRoute> route;
    int64_t tensors = 0;
    uint64_t last_use = 0;
  };
  absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  RouteCacheCounts counts_ ABSL_GUARDED_BY(mu_);
};

RouteCache& TheRouteCache() {
  static RouteCache* const cache = new RouteCache();  // never destroyed: used until exit
  return *cache;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TransferRoute>> RouteTransfer(
    std::vector<TransferTensor> tensors, const TransferPlanOptions& plan_options,
    const TransferScheduleOptions& schedule_options) {
  RouteKey key_words(tensors.size());
  key_words.Options(plan_options, schedule_options);
  for (const TransferTensor& t : tensors) key_words.Tensor(t);
  const XXH128_hash_t key = key_words.Digest();
  RouteCache& cache = TheRouteCache();
  if (std::shared_ptr<const TransferRoute> known = cache.Find(key)) return known;
  auto route = std::make_shared<TransferRoute>();
  SDRT_ASSIGN_OR_RETURN(route->plan, PlanTransfer(std::move(tensors), plan_options));
  SDRT_ASSIGN_OR_RETURN(route->schedule,
                        ScheduleTransfer(route->plan, plan_options.rank, schedule_options));
  std::shared_ptr<const TransferRoute> made = std::move(route);
  cache.Keep(key, made);
  return made;
}

RouteCacheCounts RouteCacheCountsNow() { return TheRouteCache().Counts(); }

}  // namespace sdrt::internal
