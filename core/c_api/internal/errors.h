// The C API's error plumbing (core/c_api/c_api.h): every entry point runs its body through
// Guard, which clears the thread's last error, catches every exception, and turns a Status
// into an sdrt_status_t with its message kept for sdrt_last_error().
#ifndef SDRT_CORE_C_API_INTERNAL_ERRORS_H_
#define SDRT_CORE_C_API_INTERNAL_ERRORS_H_

#include <cstddef>
#include <new>
#include <exception>
#include <string>

#include "absl/status/status.h"
#include "sdrt/core/c_api/c_api.h"

namespace sdrt::c_api {

// This thread's object of type T, made on first use. It outlives the thread's thread_local
// destructors: glibc runs those before the atexit handlers and static destructors, from
// which a C program may still call sdrt (a thread_local T would then be written after its
// destructor ran). Deleted when the thread exits; a call after that makes a new one, which
// the process keeps.
template <typename T>
T& ThreadStorage() {
  struct Reclaim {
    T** object;
    ~Reclaim() {
      delete *object;
      *object = nullptr;
    }
  };
  thread_local T* object = nullptr;  // trivially destructible: valid until the thread ends
  thread_local Reclaim reclaim{&object};
  if (object == nullptr) object = new T();
  return *object;
}

// The thread's last error message (sdrt_last_error).
std::string& LastError();
// The thread's stats of the last call (sdrt_get_last_stats).
sdrt_stats_t& LastStats();

// Records `status` as the last error and returns its code.
sdrt_status_t Fail(const absl::Status& status);

// Runs `body` (returning absl::Status) with every exception caught.
template <typename F>
sdrt_status_t Guard(const char* function, F&& body) {
  LastError().clear();
  try {
    absl::Status status = body();
    if (status.ok()) return SDRT_OK;
    return Fail(absl::Status(status.code(), std::string(function) + ": " +
                                                std::string(status.message())));
  } catch (const std::bad_alloc&) {
    return Fail(absl::ResourceExhaustedError(std::string(function) + ": out of memory"));
  } catch (const std::exception& e) {
    return Fail(absl::InternalError(std::string(function) + ": uncaught exception: " + e.what()));
  } catch (...) {
    return Fail(absl::InternalError(std::string(function) + ": uncaught exception"));
  }
}

// InvalidArgument unless `options` is null or its struct_size is exactly sizeof(T).
template <typename T>
absl::Status CheckStructSize(const T* options, const char* what) {
  if (options == nullptr || options->struct_size == sizeof(T)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      std::string(what) + ".struct_size is " + std::to_string(options->struct_size) +
      ", this library's is " + std::to_string(sizeof(T)) +
      (options->struct_size < sizeof(T) ? " (an old or uninitialised struct: use the _INIT macro)"
                                        : " (a struct from a newer header)"));
}

// InvalidArgument naming `what` when `p` is null.
inline absl::Status NotNull(const void* p, const char* what) {
  if (p != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string(what) + " is NULL");
}

}  // namespace sdrt::c_api

#endif  // SDRT_CORE_C_API_INTERNAL_ERRORS_H_
