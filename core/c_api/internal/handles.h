// What the C API's handles stand for (core/c_api/c_api.h; a call resolves a handle to its
// object through core/c_api/internal/handle_table.h), and the helpers the calls share:
// borrowing DLTensors, the per-call timeout, waiting for the caller's stream, writing
// results back into borrowed buffers, the stats of a call.
#ifndef SDRT_CORE_C_API_INTERNAL_HANDLES_H_
#define SDRT_CORE_C_API_INTERNAL_HANDLES_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/handle_table.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::c_api {

// What an sdrt_comm_t stands for.
struct CommObject {
  std::unique_ptr<Communicator> comm;
};

// What an sdrt_checkpoint_t stands for.
struct CheckpointObject {
  struct Info {
    std::string name;
    DLDataType dtype;
    std::string dtype_name;
    std::vector<int64_t> shape;
    int64_t nbytes = 0;
  };
  std::optional<CheckpointSource> source;  // set by sdrt_checkpoint_open
  std::vector<Info> infos;
};

// What an sdrt_state_dict_t stands for.
struct StateDictObject {
  Map map;  // flat: name -> Tensor or DTensor
  // Exported views of map's entries (sdrt_state_dict_get), parallel to map, made on demand;
  // dropped whenever map changes.
  std::vector<DLManagedTensor*> views;
  StateDictObject() = default;
  StateDictObject(const StateDictObject&) = delete;
  StateDictObject& operator=(const StateDictObject&) = delete;
  ~StateDictObject() { DropViews(); }
  void DropViews();
};

// What an sdrt_weight_map_t stands for: a checked, compiled map (a value; the options that
// name the handle copy it for their call, and a plan keeps its own lowering).
struct WeightMapObject {
  WeightMap map;
};

// A borrowed tensor of `dl` (shape and strides copied, the bytes not).
absl::StatusOr<Tensor> BorrowDLTensor(const DLTensor& dl);

// The communicator of a handle: nullptr for a null one that is not required; Resolve's
// InvalidArgument for a null one that is, or one that is not a live communicator handle.
absl::StatusOr<Communicator*> CommOf(sdrt_comm_t comm, bool required, const char* what);

// The map of an options struct's weight_map handle: an empty map (leaves matched by name)
// for NULL; Resolve's InvalidArgument naming `what` for one that is not a live weight map.
absl::StatusOr<WeightMap> WeightMapOf(sdrt_weight_map_t map, const char* what);

// Sets comm's timeout to `seconds` (> 0) for the scope; 0 leaves it. InvalidArgument from
// Check for a negative or non-finite value.
class ScopedTimeout {
 public:
  ScopedTimeout(Communicator* comm, double seconds);
  ~ScopedTimeout();
  static absl::Status Check(double seconds);

 private:
  Communicator* comm_ = nullptr;
  std::chrono::milliseconds saved_{0};
};

// A collective call's refusal on this rank made every rank's: when `refusal` is an error
// and `comm` (the call's communicator) is known, this rank takes part in the agreement
// that opens the call on the other ranks (AgreeAcrossRanks under `op`, the library call's
// name, within `timeout_seconds` or the communicator's timeout), carrying the refusal, so
// that they return it too ("<op>: rank R: ...", and this rank the same) instead of
// waiting for this rank or meeting its next collective call. Returns `refusal` as it is
// when it is OK or there is no communicator.
absl::Status RefusedOnEveryRank(Communicator* comm, double timeout_seconds, absl::string_view op,
                                const absl::Status& refusal);

// When `stream` is not null and `map` holds a CUDA tensor: blocks until the work enqueued
// on `stream` so far is complete (an event recorded on it, on that tensor's device).
absl::Status WaitForStream(void* stream, const Map& map);

// A copy of `map` in which every plain tensor is a Replicate DTensor over a 1-D mesh of
// `ranks` (so that the library writes it in place instead of replacing it).
absl::StatusOr<Map> ReplicatePlainTensors(const Map& map, const std::vector<int64_t>& ranks);

// For every entry of `original` whose leaf in `result` is a tensor in other memory, copies
// it into the original's buffer (same shape and dtype, else InvalidArgument).
absl::Status WriteBack(const Map& original, const Map& result);
// The same pairs (the original's buffer, the result's tensor), to copy later and again.
absl::StatusOr<std::vector<std::pair<Tensor, Tensor>>> WriteBackPairs(const Map& original,
                                                                      const Map& result);

// Resets the thread's stats and, on destruction, writes the wall time of the scope.
class StatsScope {
 public:
  StatsScope();
  ~StatsScope();
  sdrt_stats_t& stats();

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace sdrt::c_api

#endif  // SDRT_CORE_C_API_INTERNAL_HANDLES_H_
