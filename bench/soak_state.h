// The model and the values of bench/sync_soak.cc: a Llama-shaped state dict (`sdrt make`'s
// tiny-llama at a scale, float32, its real names and shapes), laid out by the library's
// built-in sharding plans (ShardingPlan::MetaStateDict), with allocated locals whose
// values the soak rewrites in place every step and checks bit for bit, with nothing
// allocated while it does.
//
// Element i (row-major index into the full tensor) of tensor t (its position in the model's
// list) holds Value(i, t, step): a 20-bit integer over 1024, so a float32 holds it exactly
// and every step changes most elements. Each local keeps, next to its values, the global
// index of each of its elements (DistributeTensor of an iota of the full tensor), made once.
#ifndef SDRT_BENCH_SOAK_STATE_H_
#define SDRT_BENCH_SOAK_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::bench {

float SoakValue(int64_t index, int64_t tensor, int64_t step);

// tiny-llama (tools/sdrt/internal/synthetic.h) scaled by `scale`, float32: its tensors in
// the architecture's order. InvalidArgument for a bad scale.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> SoakModel(double scale);

// One local (or full tensor) of the soak: `n` contiguous float32 values, the global index of
// each (nullptr: element j is index j, a full tensor) and the tensor's position.
struct SoakSlot {
  float* values = nullptr;
  const int64_t* index = nullptr;
  int64_t n = 0;
  int64_t tensor = 0;
};

// The locals of one side of the soak on this rank, kept alive with their index tensors.
class SoakSide {
 public:
  // Rank `rank`'s layout of `model` under the built-in plan `plan` ("fsdp", "tp", ...) on
  // `mesh`, each local allocated (contiguous, CPU; undefined values) in `map`. A rank outside
  // the mesh gets an empty map. The plan's and DistributeTensor's errors.
  static absl::StatusOr<SoakSide> Make(const std::vector<SafetensorsTensorSpec>& model,
                                       const std::string& plan,
                                       std::shared_ptr<const DeviceMesh> mesh, int64_t rank);

  Map& map() { return map_; }
  // Every local set to Value(., ., step).
  void Write(int64_t step);
  // Every byte of every local set to 0xFF (a NaN), so that a step that writes nothing fails.
  void Poison();
  // The elements that are not Value(., ., step), bit for bit.
  int64_t CountWrong(int64_t step) const;

 private:
  Map map_;
  std::vector<Tensor> indices_;  // per slot, its global indices
  std::vector<SoakSlot> slots_;
};

// The elements of the full tensors of `result` (GatherStateDict's) that are not
// Value(., t, step), t being the tensor's position in `model`; a tensor missing, of another
// shape or not contiguous float32 counts all its elements.
int64_t CountWrongFull(const Map& result, const std::vector<SafetensorsTensorSpec>& model,
                       int64_t step);

// Writes `model`'s full tensors at `step` to the safetensors file `path`.
absl::Status WriteSoakFile(const std::vector<SafetensorsTensorSpec>& model, int64_t step,
                           const std::string& path);

// This process's resident memory (/proc/self/status, read without allocating): all of it
// (VmRSS) and its shared-memory part (RssShmem: here MPI's intranode message segments,
// whose pages become resident as the transport first uses them); -1 when unreadable.
struct Resident {
  int64_t total = -1, shared = -1;
  int64_t private_bytes() const { return total - shared; }
};
Resident ResidentMemory();

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_SOAK_STATE_H_
