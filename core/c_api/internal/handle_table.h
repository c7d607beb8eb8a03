// The C API's table of live handles (core/c_api/c_api.h). A handle is an id in one
// process-wide table, never the address of its object: the handle structs of c_api.h
// (sdrt_state_dict_s, ...) are never defined, so no call can dereference a handle, and each
// call resolves its handles here to their objects (StateDictObject, ...). A handle that was
// destroyed, one of another kind, or a value sdrt never returned is refused with
// InvalidArgument naming what it is, instead of crashing.
//
// A handle's value packs a serial number (bits 16-63, never reused, so a destroyed handle
// stays destroyed after its object's memory is reused), a fixed tag (bits 4-15) and its
// kind (bits 0-3). A lookup is one hash probe under a mutex.
#ifndef SDRT_CORE_C_API_INTERNAL_HANDLE_TABLE_H_
#define SDRT_CORE_C_API_INTERNAL_HANDLE_TABLE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::c_api {

enum class HandleKind : uint8_t {
  kComm = 1,
  kCheckpoint = 2,
  kStateDict = 3,
  kReshardPlan = 4,
  kReshardBound = 5,
  kWeightMap = 6,
};

// What each handle stands for (core/c_api/internal/handles.h; the reshard ones in
// core/c_api/reshard.cc).
struct CommObject;
struct CheckpointObject;
struct StateDictObject;
struct ReshardPlanObject;
struct ReshardBoundObject;
struct WeightMapObject;

// The object type and kind of each handle type.
template <typename Handle>
struct HandleTraits;
template <>
struct HandleTraits<sdrt_comm_t> {
  using Object = CommObject;
  static constexpr HandleKind kKind = HandleKind::kComm;
};
template <>
struct HandleTraits<sdrt_checkpoint_t> {
  using Object = CheckpointObject;
  static constexpr HandleKind kKind = HandleKind::kCheckpoint;
};
template <>
struct HandleTraits<sdrt_state_dict_t> {
  using Object = StateDictObject;
  static constexpr HandleKind kKind = HandleKind::kStateDict;
};
template <>
struct HandleTraits<sdrt_reshard_plan_t> {
  using Object = ReshardPlanObject;
  static constexpr HandleKind kKind = HandleKind::kReshardPlan;
};
template <>
struct HandleTraits<sdrt_reshard_bound_t> {
  using Object = ReshardBoundObject;
  static constexpr HandleKind kKind = HandleKind::kReshardBound;
};
template <>
struct HandleTraits<sdrt_weight_map_t> {
  using Object = WeightMapObject;
  static constexpr HandleKind kKind = HandleKind::kWeightMap;
};

// Enters `object` in the table as a live handle of `kind` and returns the handle's value.
uintptr_t RegisterHandle(HandleKind kind, void* object);
// The object of the live handle `handle` of `kind`. InvalidArgument naming `what` when the
// handle is null, destroyed, of another kind, or a value sdrt never returned.
absl::StatusOr<void*> LookUpHandle(uintptr_t handle, HandleKind kind, const char* what);
// LookUpHandle, and the handle leaves the table (the caller then frees the object).
absl::StatusOr<void*> UnregisterHandle(uintptr_t handle, HandleKind kind, const char* what);

// A new live handle owning `object` until DestroyHandle: NewHandle<sdrt_comm_t>(...).
template <typename Handle>
Handle NewHandle(std::unique_ptr<typename HandleTraits<Handle>::Object> object) {
  const uintptr_t handle = RegisterHandle(HandleTraits<Handle>::kKind, object.get());
  object.release();
  return reinterpret_cast<Handle>(handle);
}

// The object of a live handle (LookUpHandle's errors).
template <typename Handle>
absl::StatusOr<typename HandleTraits<Handle>::Object*> Resolve(Handle handle, const char* what) {
  SDRT_ASSIGN_OR_RETURN(void* object, LookUpHandle(reinterpret_cast<uintptr_t>(handle),
                                                   HandleTraits<Handle>::kKind, what));
  return static_cast<typename HandleTraits<Handle>::Object*>(object);
}

// Removes a live handle from the table and frees its object; OK for null. LookUpHandle's
// errors otherwise (a second destroy among them), with nothing freed.
template <typename Handle>
absl::Status DestroyHandle(Handle handle, const char* what) {
  if (handle == nullptr) return absl::OkStatus();
  SDRT_ASSIGN_OR_RETURN(void* object, UnregisterHandle(reinterpret_cast<uintptr_t>(handle),
                                                       HandleTraits<Handle>::kKind, what));
  delete static_cast<typename HandleTraits<Handle>::Object*>(object);
  return absl::OkStatus();
}

}  // namespace sdrt::c_api

#endif  // SDRT_CORE_C_API_INTERNAL_HANDLE_TABLE_H_
