// Device: where a tensor's bytes live. CPU, CUDA:index, or meta (no storage at all:
// shape and dtype only, what an engine passes when it wants sdrt to allocate a shard).
#ifndef SDRT_TENSOR_DEVICE_H_
#define SDRT_TENSOR_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

enum class DeviceType : uint8_t { kCPU, kCUDA, kMeta };

// A stream handle for asynchronous work: a cudaStream_t passed as void* so that no
// header outside cuda/ needs CUDA's. nullptr is CUDA's legacy default stream; CPU work
// ignores it and completes before returning.
using StreamHandle = void*;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // CUDA ordinal; always 0 for CPU and meta.

  static constexpr Device CPU() { return Device{DeviceType::kCPU, 0}; }
  static constexpr Device CUDA(int index) { return Device{DeviceType::kCUDA, index}; }
  static constexpr Device Meta() { return Device{DeviceType::kMeta, 0}; }

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_meta() const { return type == DeviceType::kMeta; }

  // "cpu", "cuda:1", "meta": the strings PyTorch prints.
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// Parses "cpu", "cuda" (index 0), "cuda:3", "meta". InvalidArgument otherwise.
absl::StatusOr<Device> ParseDevice(absl::string_view text);

}  // namespace sdrt

#endif  // SDRT_TENSOR_DEVICE_H_
