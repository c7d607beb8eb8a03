#include "sdrt/core/distributed/internal/engine/route_cache.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt::internal {
namespace {

// The tag of DescribedTransfer's encoding (a verb's own encoding has its own tag).
constexpr int64_t kDescriptorsTag = 0x5344525444455343;  // "SDRTDESC"

class RouteCache {
 public:
  using Key = std::pair<uint64_t, uint64_t>;

  std::shared_ptr<const TransferRoute> Find(const Key& key) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (e.key == key) {
        e.last_use = ++clock_;
        ++counts_.hits;
        return e.route;
      }
    }
    ++counts_.misses;
    return nullptr;
  }

  void Keep(const Key& key, std::shared_ptr<const TransferRoute> route)
      ABSL_LOCKS_EXCLUDED(mu_) {
    const int64_t tensors = static_cast<int64_t>(route->plan.tensors.size());
    if (tensors > kMaxCachedTensors) return;
    absl::MutexLock lock(&mu_);
    for (const Entry& e : entries_) {
      if (e.key == key) return;  // another thread made it meanwhile
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
    Key key;
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

RouteKey::RouteKey(size_t tensors) { Reserve(tensors); }

void RouteKey::Reserve(size_t tensors) {
  words_.reserve(words_.size() + tensors * 16 + 16);
  names_.reserve(names_.size() + tensors * 32);
}

void RouteKey::Name(absl::string_view name) {
  Word(static_cast<int64_t>(name.size()));
  names_.append(name.data(), name.size());
}

void RouteKey::Ints(IntSpan values) {
  Word(static_cast<int64_t>(values.size()));
  for (int64_t v : values) Word(v);
}

void RouteKey::Mesh(const DeviceMesh* mesh) {
  if (mesh == nullptr) return Word(0);
  if (mesh != last_mesh_) {
    auto [it, fresh] = meshes_.try_emplace(mesh, 0);
    if (fresh) {
      std::vector<uint64_t> content;
      content.push_back(mesh->shape().size());
      for (int64_t s : mesh->shape()) content.push_back(static_cast<uint64_t>(s));
      for (int64_t r : mesh->ranks()) content.push_back(static_cast<uint64_t>(r));
      it->second = XXH3_64bits(content.data(), content.size() * sizeof(uint64_t));
    }
    last_mesh_ = mesh;
    last_hash_ = it->second;
  }
  Word(static_cast<int64_t>(last_hash_ | 1));
}

void RouteKey::Placements(absl::Span<const Placement> placements) {
  Word(static_cast<int64_t>(placements.size()));
  for (const Placement& p : placements) {
    Word(static_cast<int64_t>(p.kind()) | static_cast<int64_t>(p.reduce_op()) << 8);
    Word(p.dim());
    Word(p.split_factor());
  }
}

void RouteKey::Tensor(const TransferTensor& t) {
  Name(t.name);
  Word(static_cast<int64_t>(t.dtype) | (t.allow_uncovered ? int64_t{1} << 16 : 0) |
       (t.destination_dtype ? (int64_t{1} << 17) | static_cast<int64_t>(*t.destination_dtype) << 24
                            : 0));
  Ints(t.shape);
  Side(t.source);
  Side(t.destination);
}

void RouteKey::AppendDigestOf(const RouteKey& other) {
  const auto [low, high] = other.Digest();
  words_.push_back(low);
  words_.push_back(high);
}

void RouteKey::Side(const TransferLayout& side) {
  Mesh(side.mesh.get());
  Placements(side.placements);
  Word(static_cast<int64_t>(side.boxes.size()));
  for (const TransferBox& box : side.boxes) {
    Word(box.rank);
    Ints(box.offsets);
    Ints(box.sizes);
  }
}

std::pair<uint64_t, uint64_t> RouteKey::Digest() const {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, words_.data(), words_.size() * sizeof(uint64_t));
  XXH3_128bits_update(state, names_.data(), names_.size());
  const XXH128_hash_t digest = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return {digest.low64, digest.high64};
}

void DescribedTransfer::AddToKey(RouteKey& key) const {
  key.Reserve(tensors_.size());
  key.Word(kDescriptorsTag);
  for (const TransferTensor& t : tensors_) key.Tensor(t);
}

absl::StatusOr<std::shared_ptr<const TransferRoute>> RouteTransfer(
    const TransferRequest& request, const TransferPlanOptions& plan_options,
    const TransferScheduleOptions& schedule_options) {
  // Room for the header only: a request that writes its tensors here reserves for them
  // (one that hands over a digest of a key it wrote already needs none).
  RouteKey key_words(0);
  key_words.Word(plan_options.rank);
  key_words.Word(plan_options.world_size);
  key_words.Word((plan_options.broadcast ? 1 : 0) | (plan_options.all_gather ? 2 : 0));
  key_words.Word(plan_options.max_cells);
  key_words.Word(schedule_options.bucket_bytes);
  key_words.Word(schedule_options.chunk_alignment);
  key_words.Ints(plan_options.node_of_rank);
  request.AddToKey(key_words);
  const RouteCache::Key key = key_words.Digest();
  RouteCache& cache = TheRouteCache();
  if (std::shared_ptr<const TransferRoute> known = cache.Find(key)) return known;
  SDRT_ASSIGN_OR_RETURN(std::vector<TransferTensor> tensors, request.Describe());
  auto route = std::make_shared<TransferRoute>();
  SDRT_ASSIGN_OR_RETURN(route->plan, PlanTransfer(std::move(tensors), plan_options));
  SDRT_ASSIGN_OR_RETURN(route->schedule,
                        ScheduleTransfer(route->plan, plan_options.rank, schedule_options));
  std::shared_ptr<const TransferRoute> made = std::move(route);
  cache.Keep(key, made);
  return made;
}

RouteCacheCounts RouteCacheCountsNow() { return TheRouteCache().Counts(); }

absl::Span<TransferTensor> ReusedDescriptors(size_t n) {
  thread_local std::vector<TransferTensor> reused;
  if (n <= kMaxReusedDescriptors && reused.size() > kMaxReusedDescriptors) {
    reused.resize(kMaxReusedDescriptors);
    reused.shrink_to_fit();
  }
  if (reused.size() < n) reused.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TransferTensor& t = reused[i];
    t.name.clear();
    t.dtype = DType::kFloat32;
    t.shape.clear();
    for (TransferLayout* side : {&t.source, &t.destination}) {
      side->mesh.reset();
      side->placements.clear();
      side->boxes.clear();
    }
    t.allow_uncovered = false;
    t.destination_dtype.reset();
  }
  return absl::MakeSpan(reused.data(), n);
}

}  // namespace sdrt::internal
