// Starting worker threads when some may not start. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_THREADS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_THREADS_H_

#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

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

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_THREADS_H_
