// A test-only communicator of one process: every collective is a local copy (test-only,
// header-only). `rank` and `size` are what it reports (tests of group checks pass other
// values); with `stages_cpu` it also takes CPU tensors, as the NCCL backend does.
#ifndef SDRT_TESTS_SUPPORT_LOOPBACK_COMMUNICATOR_H_
#define SDRT_TESTS_SUPPORT_LOOPBACK_COMMUNICATOR_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sdrt/comm/communicator.h"

namespace sdrt::test {

class Loopback final : public Communicator {
 public:
  Loopback(Device device, int rank, int size, const char* name, bool stages_cpu = false)
      : Communicator(rank, size), device_(device), name_(name), stages_cpu_(stages_cpu) {}
  absl::string_view backend() const override { return name_; }
  Device device() const override { return device_; }

 protected:
  absl::Status DoAllGather(void* output, const void* input, int64_t bytes) override {
    std::memmove(output, input, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status DoAllGatherV(void* output, const void* input,
                            absl::Span<const int64_t> byte_counts) override {
    std::memmove(output, input, static_cast<size_t>(byte_counts[0]));
    return absl::OkStatus();
  }
  absl::Status DoBroadcast(absl::Span<const Tensor>, int) override { return absl::OkStatus(); }
  absl::Status DoAllReduce(Tensor&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status DoBroadcastBytes(std::string*, int) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override {
    return std::vector<std::string>{mine};
  }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override {
    return std::unique_ptr<Communicator>(new Loopback(device_, 0, 1, name_, stages_cpu_));
  }
  absl::Status DoBarrier() override { return absl::OkStatus(); }
  bool StagesCpuTensors() const override { return stages_cpu_; }

 private:
  Device device_;
  const char* name_;
  bool stages_cpu_;
};

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_LOOPBACK_COMMUNICATOR_H_
