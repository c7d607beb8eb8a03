#include "sdrt/core/c_api/internal/handles.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::c_api {

void StateDictObject::DropViews() {
  for (DLManagedTensor* view : views) {
    if (view != nullptr && view->deleter != nullptr) view->deleter(view);
  }
  views.clear();
}

namespace {

// A DLManagedTensor owning copies of a borrowed DLTensor's shape and strides; its deleter
// frees only itself, and only once the tensor holds it: a FromDLPack that fails after making
// its storage runs the deleter too, and BorrowDLTensor then frees the record itself.
struct Borrowed {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  bool handed_over = false;
};

void DeleteBorrowed(DLManagedTensor* managed) {
  Borrowed* borrowed = static_cast<Borrowed*>(managed->manager_ctx);
  if (borrowed->handed_over) delete borrowed;
}

}  // namespace

absl::StatusOr<Tensor> BorrowDLTensor(const DLTensor& dl) {
  if (dl.ndim < 0) return absl::InvalidArgumentError("DLTensor.ndim is negative");
  if (dl.ndim > 0 && dl.shape == nullptr) {
    return absl::InvalidArgumentError("DLTensor.shape is NULL");
  }
  auto borrowed = std::make_unique<Borrowed>();
  borrowed->shape.assign(dl.shape, dl.shape + dl.ndim);
  borrowed->managed.dl_tensor = dl;
  borrowed->managed.dl_tensor.shape = borrowed->shape.data();
  if (dl.strides != nullptr) {
    borrowed->strides.assign(dl.strides, dl.strides + dl.ndim);
    borrowed->managed.dl_tensor.strides = borrowed->strides.data();
  }
  bool empty = false;
  for (int64_t d : borrowed->shape) empty = empty || d == 0;
  if (dl.data == nullptr && !empty) {
    return absl::InvalidArgumentError("DLTensor.data is NULL for a tensor with elements");
  }
  borrowed->managed.manager_ctx = borrowed.get();
  borrowed->managed.deleter = &DeleteBorrowed;
  absl::StatusOr<Tensor> tensor = FromDLPack(&borrowed->managed);
  if (!tensor.ok()) return tensor.status();  // freed here by unique_ptr
  borrowed->handed_over = true;               // now the tensor's storage frees it
  borrowed.release();
  return tensor;
}

absl::StatusOr<Communicator*> CommOf(sdrt_comm_t comm, bool required, const char* what) {
  if (comm == nullptr && !required) return nullptr;
  SDRT_ASSIGN_OR_RETURN(CommObject * object, Resolve(comm, what));
  return object->comm.get();
}

absl::StatusOr<WeightMap> WeightMapOf(sdrt_weight_map_t map, const char* what) {
  if (map == nullptr) return WeightMap();
  SDRT_ASSIGN_OR_RETURN(WeightMapObject * object, Resolve(map, what));
  return object->map;
}

ScopedTimeout::ScopedTimeout(Communicator* comm, double seconds) {
  if (comm == nullptr || !(seconds > 0)) return;
  comm_ = comm;
  saved_ = comm->timeout();
  comm->set_timeout(std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000)))));
}

ScopedTimeout::~ScopedTimeout() {
  if (comm_ != nullptr) comm_->set_timeout(saved_);
}

absl::Status ScopedTimeout::Check(double seconds) {
  if (std::isfinite(seconds) && seconds >= 0 && seconds < 1e9) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("timeout_seconds must be in [0, 1e9) seconds (0: the communicator's), got ",
                   seconds));
}

absl::Status RefusedOnEveryRank(Communicator* comm, double timeout_seconds, absl::string_view op,
                                const absl::Status& refusal) {
  if (refusal.ok() || comm == nullptr) return refusal;
  ScopedTimeout timeout(comm, ScopedTimeout::Check(timeout_seconds).ok() ? timeout_seconds : 0);
  const absl::Status agreed = AgreeAcrossRanks(*comm, op, "", {}, refusal);
  return agreed.ok() ? refusal : agreed;  // (never OK: this rank's refusal is in it)
}

absl::Status WaitForStream(void* stream, const Map& map) {
  if (stream == nullptr) return absl::OkStatus();
  for (size_t i = 0; i < map.size(); ++i) {
    const Value& v = map.value(i);
    Device device = Device::CPU();
    if (v.kind() == ValueKind::kTensor) device = v.as_tensor().device();
    if (v.kind() == ValueKind::kDTensor) device = v.as_dtensor().device();
    if (!device.is_cuda()) continue;
    SDRT_ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(device.index, EventTiming::kDisabled));
    SDRT_RETURN_IF_ERROR(event.Record(stream));
    return event.Synchronize();
  }
  return absl::OkStatus();
}

absl::StatusOr<Map> ReplicatePlainTensors(const Map& map, const std::vector<int64_t>& ranks) {
  Map out = map;
  std::shared_ptr<const DeviceMesh> cpu_mesh;
  std::shared_ptr<const DeviceMesh> cuda_mesh;
  for (size_t i = 0; i < out.size(); ++i) {
    Value& v = out.value(i);
    if (v.kind() != ValueKind::kTensor) continue;
    const Tensor& t = v.as_tensor();
    if (t.dim() == 0) continue;  // 0-dim leaves are replaced by values; WriteBack copies them
    std::shared_ptr<const DeviceMesh>& mesh = t.device().is_cuda() ? cuda_mesh : cpu_mesh;
    if (mesh == nullptr) {
      const int64_t n = static_cast<int64_t>(ranks.size());
      SDRT_ASSIGN_OR_RETURN(DeviceMesh made,
                            DeviceMesh::Create(IntVector{n}, ranks, {},
                                               t.device().is_cuda() ? "cuda" : "cpu"));
      mesh = std::make_shared<const DeviceMesh>(std::move(made));
    }
    SDRT_ASSIGN_OR_RETURN(DTensor d, DTensor::Make(t, mesh, {Placement::Replicate()}, t.shape()));
    v = Value(std::move(d));
  }
  return out;
}

namespace {

const Tensor* TensorOf(const Value& v) {
  if (v.kind() == ValueKind::kTensor) return &v.as_tensor();
  if (v.kind() == ValueKind::kDTensor) return &v.as_dtensor().local();
  return nullptr;
}

}  // namespace

absl::Status WriteBack(const Map& original, const Map& result) {
  SDRT_ASSIGN_OR_RETURN(const auto pairs, WriteBackPairs(original, result));
  for (const auto& [dst, src] : pairs) {
    Tensor target = dst;
    SDRT_RETURN_IF_ERROR(target.CopyFrom(src));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<Tensor, Tensor>>> WriteBackPairs(const Map& original,
                                                                      const Map& result) {
  std::vector<std::pair<Tensor, Tensor>> pairs;
  for (size_t i = 0; i < original.size(); ++i) {
    const Tensor* dst = TensorOf(original.value(i));
    const Value* got = result.Find(original.key(i));
    if (dst == nullptr || got == nullptr) continue;
    const Tensor* src = TensorOf(*got);
    if (src == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("entry '", original.key(i),
                                                     "' became a ", ValueKindName(got->kind())));
    }
    if (src->data_ptr() == dst->data_ptr() && src->strides() == dst->strides()) continue;
    if (src->shape() != dst->shape() || src->dtype() != dst->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry '", original.key(i), "': the result is ", DTypeName(src->dtype()), " ",
          ShapeToString(src->shape()), ", the buffer ", DTypeName(dst->dtype()), " ",
          ShapeToString(dst->shape()), " (sdrt writes only into the buffers given)"));
    }
    pairs.emplace_back(*dst, *src);
  }
  return pairs;
}

StatsScope::StatsScope() : start_(std::chrono::steady_clock::now()) {
  LastStats() = sdrt_stats_t SDRT_STATS_INIT;
}

StatsScope::~StatsScope() {
  LastStats().seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

sdrt_stats_t& StatsScope::stats() { return LastStats(); }

}  // namespace sdrt::c_api
