// A route (a plan and this rank's schedule of it) and the cache of the last few routes
// made. Every call of the engine plans and schedules its move from descriptors alone
// (plan.h, schedule.h): pure functions of the tensors' names, dtypes, shapes and layouts,
// the rank, the world size and the bucket size. A program that moves one layout again (a
// trainer exporting its weights every step, an engine receiving every weight update, a
// benchmark's iterations) asks for the same route; the cache hands back the one made
// before instead of planning again, as PyTorch keeps the transform plans of
// DTensor.redistribute (_gen_transform_infos) once made. The buffers and the locals are
// not part of a route: each call compiles its own program (program.h) against them.
//
// The key is a 128-bit XXH3 hash of everything a route depends on (each mesh by its
// shape and ranks), so two requests with the same key get the same route. The cache keeps
// kMaxCachedRoutes routes and at most kMaxCachedTensors tensors in all (a larger route is
// made and not kept), the least recently used dropped first; it is shared by every
// thread and communicator (a route names no communicator). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_ROUTE_CACHE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_ROUTE_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"

namespace sdrt::internal {

inline constexpr int kMaxCachedRoutes = 8;
inline constexpr int64_t kMaxCachedTensors = int64_t{1} << 20;

struct TransferRoute {
  TransferPlan plan;
  TransferSchedule schedule;
};

// The words and name bytes a route depends on, hashed together. A request writes first a
// tag naming how it encodes its tensors, then each tensor so that the words and bytes
// determine its descriptor (lengths before the values they count), so two requests with
// the same key describe the same move.
class RouteKey {
 public:
  // Room for the words and names of `tensors` tensors (Reserve).
  explicit RouteKey(size_t tensors);
  // Room for `tensors` more tensors' words and names, so that writing them does not grow
  // the buffers by doublings.
  void Reserve(size_t tensors);
  void Word(int64_t v) { words_.push_back(static_cast<uint64_t>(v)); }
  // Its length, then its bytes.
  void Name(absl::string_view name);
  // Its length, then its values.
  void Ints(IntSpan values);
  // A mesh by its content (shape and ranks), hashed once per mesh object; 0 for none.
  void Mesh(const DeviceMesh* mesh);
  void Placements(absl::Span<const Placement> placements);
  // A descriptor whole (DescribedTransfer's encoding).
  void Tensor(const TransferTensor& t);
  // The digest of `other` (two words): for a request that wrote its tensors' words while
  // it walked them for another reason (one pass over them, not two), hashed once.
  void AppendDigestOf(const RouteKey& other);
  // The 128-bit XXH3 hash of everything put.
  std::pair<uint64_t, uint64_t> Digest() const;

 private:
  void Side(const TransferLayout& side);

  std::vector<uint64_t> words_;
  std::string names_;
  const DeviceMesh* last_mesh_ = nullptr;
  uint64_t last_hash_ = 0;
  absl::flat_hash_map<const DeviceMesh*, uint64_t> meshes_;  // each mesh object hashed
};

// What one call of the engine moves, as the route cache needs it: the key words of its
// tensors, and their descriptors, made only when no route of that key is cached (a verb
// that moves the same tensors every call then builds no descriptor after the first).
class TransferRequest {
 public:
  virtual ~TransferRequest() = default;
  virtual size_t size() const = 0;
  // Puts the request's tag and its tensors into `key`, in the order every rank lists them.
  virtual void AddToKey(RouteKey& key) const = 0;
  // The descriptors, in the same order; their errors (a layout rank `rank` is not in).
  virtual absl::StatusOr<std::vector<TransferTensor>> Describe() const = 0;
};

// A request whose descriptors are made already (read during the call only).
class DescribedTransfer final : public TransferRequest {
 public:
  explicit DescribedTransfer(absl::Span<const TransferTensor> tensors) : tensors_(tensors) {}
  size_t size() const override { return tensors_.size(); }
  void AddToKey(RouteKey& key) const override;
  absl::StatusOr<std::vector<TransferTensor>> Describe() const override {
    return std::vector<TransferTensor>(tensors_.begin(), tensors_.end());
  }

 private:
  absl::Span<const TransferTensor> tensors_;
};

// The route of `request` for rank `plan_options.rank` (>= 0): PlanTransfer then
// ScheduleTransfer of its descriptors, or the cached route of a request with the same key.
// Their errors and Describe's (not cached).
absl::StatusOr<std::shared_ptr<const TransferRoute>> RouteTransfer(
    const TransferRequest& request, const TransferPlanOptions& plan_options,
    const TransferScheduleOptions& schedule_options);

// The calling thread's descriptor list, `n` cleared descriptors long, whose names, shapes,
// placements and boxes keep the memory of the thread's earlier lists (a verb describes the
// same tensors every call; a cached route needs them only for its key, and building them
// anew was most of a repeated call's allocations). Valid until the thread's next call;
// the memory of at most kMaxReusedDescriptors is kept between calls.
inline constexpr size_t kMaxReusedDescriptors = size_t{1} << 16;
absl::Span<TransferTensor> ReusedDescriptors(size_t n);

// How many requests the cache answered and how many it planned, since the process started
// (for tests).
struct RouteCacheCounts {
  int64_t hits = 0;
  int64_t misses = 0;
};
RouteCacheCounts RouteCacheCountsNow();

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_ROUTE_CACHE_H_
