#include "sdrt/core/c_api/internal/handle_table.h"

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace sdrt::c_api {
namespace {

static_assert(sizeof(uintptr_t) == 8, "handle values need 64-bit pointers");

constexpr uintptr_t kKindBits = 4;
constexpr uintptr_t kKindMask = (uintptr_t{1} << kKindBits) - 1;
constexpr uintptr_t kTagShift = kKindBits;
constexpr uintptr_t kTagMask = uintptr_t{0xFFF} << kTagShift;
constexpr uintptr_t kTag = uintptr_t{0x5D7} << kTagShift;
constexpr uintptr_t kSerialShift = 16;
constexpr uintptr_t kLastKind = static_cast<uintptr_t>(HandleKind::kWeightMap);

const char* KindName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kComm:
      return "communicator";
    case HandleKind::kCheckpoint:
      return "checkpoint";
    case HandleKind::kStateDict:
      return "state dict";
    case HandleKind::kReshardPlan:
      return "reshard plan";
    case HandleKind::kReshardBound:
      return "bound reshard";
    case HandleKind::kWeightMap:
      return "weight map";
  }
  return "unknown";
}

class HandleTable {
 public:
  uintptr_t Register(HandleKind kind, void* object) {
    absl::MutexLock lock(&mutex_);
    const uintptr_t handle = (++last_serial_ << kSerialShift) | kTag | static_cast<uintptr_t>(kind);
    live_.emplace(handle, object);
    return handle;
  }

  absl::StatusOr<void*> Find(uintptr_t handle, HandleKind kind, const char* what, bool remove) {
    if (handle == 0) return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
    absl::MutexLock lock(&mutex_);
    const auto it = live_.find(handle);
    if (it != live_.end() && KindOf(handle) == kind) {
      void* object = it->second;
      if (remove) live_.erase(it);
      return object;
    }
    return absl::InvalidArgumentError(Describe(handle, it != live_.end(), kind, what));
  }

 private:
  static HandleKind KindOf(uintptr_t handle) { return static_cast<HandleKind>(handle & kKindMask); }

  // Why `handle` is not a live handle of `kind`.
  std::string Describe(uintptr_t handle, bool live, HandleKind kind, const char* what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const uintptr_t kind_bits = handle & kKindMask;
    const uintptr_t serial = handle >> kSerialShift;
    const bool made_by_sdrt = (handle & kTagMask) == kTag && serial >= 1 &&
                              serial <= last_serial_ && kind_bits >= 1 && kind_bits <= kLastKind;
    if (!made_by_sdrt) {
      return absl::StrFormat("%s (%#x) is not a %s handle: sdrt never returned this value", what,
                             handle, KindName(kind));
    }
    const HandleKind found = KindOf(handle);
    if (live) {
      return absl::StrCat(what, " is a ", KindName(found), " handle, not a ", KindName(kind));
    }
    if (found == kind) {
      return absl::StrCat(what, " is a ", KindName(kind), " handle that was already destroyed");
    }
    return absl::StrCat(what, " is a destroyed ", KindName(found), " handle, not a ",
                        KindName(kind));
  }

  absl::Mutex mutex_;
  uintptr_t last_serial_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<uintptr_t, void*> live_ ABSL_GUARDED_BY(mutex_);
};

// Never destroyed: handles may be destroyed from atexit handlers and static destructors.
HandleTable& Table() {
  static HandleTable* const table = new HandleTable();
  return *table;
}

}  // namespace

uintptr_t RegisterHandle(HandleKind kind, void* object) { return Table().Register(kind, object); }

absl::StatusOr<void*> LookUpHandle(uintptr_t handle, HandleKind kind, const char* what) {
  return Table().Find(handle, kind, what, /*remove=*/false);
}

absl::StatusOr<void*> UnregisterHandle(uintptr_t handle, HandleKind kind, const char* what) {
  return Table().Find(handle, kind, what, /*remove=*/true);
}

}  // namespace sdrt::c_api
