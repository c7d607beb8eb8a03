#include "sdrt/tensor/device.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sdrt {

std::string Device::ToString() const {
  switch (type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return absl::StrCat("cuda:", index);
    case DeviceType::kMeta:
      return "meta";
  }
  return "invalid";
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  const absl::string_view original = text;
  if (text == "cpu") return Device::CPU();
  if (text == "meta") return Device::Meta();
  if (text == "cuda") return Device::CUDA(0);
  if (absl::ConsumePrefix(&text, "cuda:") && !text.empty() && text.size() <= 9 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int index = 0;
    if (absl::SimpleAtoi(text, &index)) return Device::CUDA(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot parse device '", original, "' (want cpu, meta, cuda or cuda:N)"));
}

}  // namespace sdrt
