// Worker threads that neither end the process nor lose an error: starting them when some
// may not start, and running out of memory on them. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_THREADS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_THREADS_H_

#include <cstddef>
#include <exception>
#include <new>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sdrt::internal {

// Starts up to `count` threads, thread i running body(i), into `threads` (which the caller
// joins). A thread that cannot start (out of memory, a thread limit: std::bad_alloc or
// std::system_error) ends the starting, so the caller's work goes to those that did; no
// exception leaves with threads running, which would end the process. Returns how many
// started.
template <typename Body>
size_t StartThreads(size_t count, const Body& body, std::vector<std::thread>& threads) {
  for (size_t i = 0; i < count; ++i) {
    try {
      threads.emplace_back(body, i);
    } catch (const std::exception&) {
      break;
    }
  }
  return threads.size();
}

// fn() (an absl::Status) on a worker thread, std::bad_alloc becoming kResourceExhausted
// with no message: an empty message allocates nothing, and an exception leaving a thread
// would end the process. OutOfMemorySaid gives it its words on the caller's thread.
template <typename Fn>
absl::Status OnWorkerThread(const Fn& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return absl::Status(absl::StatusCode::kResourceExhausted, "");
  }
}

// `status`, or for OnWorkerThread's out of memory "out of memory <where>".
inline absl::Status OutOfMemorySaid(absl::Status status, absl::string_view where) {
  if (status.ok() || !status.message().empty()) return status;
  return absl::ResourceExhaustedError(absl::StrCat("out of memory ", where));
}

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_THREADS_H_
