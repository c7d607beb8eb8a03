// sdrt/c_api.h: state dict handles (name -> borrowed tensor or DTensor).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/dtensor_spec.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

absl::StatusOr<sdrt::DTensor> MakeDTensor(sdrt::Tensor local, const sdrt_dtensor_spec_t& spec) {
  SDRT_RETURN_IF_ERROR(c_api::NotNull(spec.placements, "spec.placements"));
  SDRT_ASSIGN_OR_RETURN(c_api::DTensorSpec read,
                        c_api::ReadDTensorSpec(spec, local.device().is_cuda() ? "cuda" : "cpu"));
  return sdrt::DTensor::Make(std::move(local), std::move(read.mesh), std::move(read.placements),
                             std::move(read.global_shape));
}

absl::Status CheckIndex(const c_api::StateDictObject& sd, int64_t i) {
  const int64_t n = static_cast<int64_t>(sd.map.size());
  if (i < 0 || i >= n) return absl::OutOfRangeError(absl::StrCat("entry ", i, " of ", n));
  return absl::OkStatus();
}

}  // namespace

extern "C" {

sdrt_status_t sdrt_state_dict_create(sdrt_state_dict_t* out) {
  return Guard("sdrt_state_dict_create", [&] {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    *out = c_api::NewHandle<sdrt_state_dict_t>(std::make_unique<c_api::StateDictObject>());
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_state_dict_add(sdrt_state_dict_t state_dict, const char* name,
                                  const DLTensor* tensor, const sdrt_dtensor_spec_t* spec) {
  return Guard("sdrt_state_dict_add", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::StateDictObject * sd, c_api::Resolve(state_dict, "state_dict"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(name, "name"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(tensor, "tensor"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(spec, "spec"));
    SDRT_ASSIGN_OR_RETURN(sdrt::Tensor local, c_api::BorrowDLTensor(*tensor));
    sdrt::Value value;
    if (spec != nullptr) {
      absl::StatusOr<sdrt::DTensor> d = MakeDTensor(std::move(local), *spec);
      if (!d.ok()) {
        return absl::Status(d.status().code(),
                            absl::StrCat("'", name, "': ", d.status().message()));
      }
      value = sdrt::Value(*std::move(d));
    } else {
      value = sdrt::Value(std::move(local));
    }
    sd->DropViews();
    sd->map.Set(name, std::move(value));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_state_dict_count(sdrt_state_dict_t state_dict, int64_t* count) {
  return Guard("sdrt_state_dict_count", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::StateDictObject * sd, c_api::Resolve(state_dict, "state_dict"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(count, "count"));
    *count = static_cast<int64_t>(sd->map.size());
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_state_dict_get(sdrt_state_dict_t state_dict, int64_t i, const char** name,
                                  const DLTensor** tensor, int* is_dtensor) {
  return Guard("sdrt_state_dict_get", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::StateDictObject * sd, c_api::Resolve(state_dict, "state_dict"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(name, "name"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(tensor, "tensor"));
    SDRT_RETURN_IF_ERROR(CheckIndex(*sd, i));
    const size_t at = static_cast<size_t>(i);
    const sdrt::Value& v = sd->map.value(at);
    const sdrt::Tensor* t = nullptr;
    if (v.kind() == sdrt::ValueKind::kTensor) t = &v.as_tensor();
    if (v.kind() == sdrt::ValueKind::kDTensor) t = &v.as_dtensor().local();
    if (t == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("entry '", sd->map.key(at), "' is a ", sdrt::ValueKindName(v.kind())));
    }
    if (sd->views.size() != sd->map.size()) {
      sd->DropViews();
      sd->views.assign(sd->map.size(), nullptr);
    }
    DLManagedTensor*& view = sd->views[at];
    if (view == nullptr) {
      SDRT_ASSIGN_OR_RETURN(view, sdrt::ToDLPack(*t));
    }
    *name = sd->map.key(at).c_str();
    *tensor = &view->dl_tensor;
    if (is_dtensor != nullptr) *is_dtensor = v.kind() == sdrt::ValueKind::kDTensor ? 1 : 0;
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_state_dict_find(sdrt_state_dict_t state_dict, const char* name,
                                   int64_t* index) {
  return Guard("sdrt_state_dict_find", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::StateDictObject * sd, c_api::Resolve(state_dict, "state_dict"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(name, "name"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(index, "index"));
    for (size_t i = 0; i < sd->map.size(); ++i) {
      if (sd->map.key(i) == name) {
        *index = static_cast<int64_t>(i);
        return absl::OkStatus();
      }
    }
    return absl::NotFoundError(absl::StrCat("no entry '", name, "'"));
  });
}

sdrt_status_t sdrt_state_dict_destroy(sdrt_state_dict_t state_dict) {
  return Guard("sdrt_state_dict_destroy",
               [&] { return c_api::DestroyHandle(state_dict, "state_dict"); });
}

}  // extern "C"
