// `load_device_bench --file F [--readers N] [--repeat K] [--json PATH]`: one rank's
// LoadStateDict of a checkpoint into fresh CUDA locals (mesh of one, read kAll, N reader
// threads, LoadOptions' other defaults) against the two floors of the same bytes in the same
// process: pread by N threads, each into its own pinned staging-sized buffer (the storage
// half), and cudaMemcpyAsync from pinned memory to the device of as many bytes (the copy
// half). The load's first call is timed apart from the
// later ones: it allocates the pinned staging buffers (LoadStats::staging_seconds), which the
// process keeps for the later calls; planning (LoadStats::plan_seconds) is reported per call.
// Every tensor of the first load is compared byte for byte with the file. Prints one JSON
// object (and writes it to PATH); exit 1 when a tensor differs or a step fails. The device
// check (scripts/device-check.sh, step load-h2d) runs it; it needs a CUDA device.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kChunk = int64_t{256} << 20;  // LoadOptions::staging_bytes' default

template <typename T>
T Check(absl::StatusOr<T> value, const std::string& what) {
  if (!value.ok()) {
    std::cerr << "load_device_bench: " << what << ": " << value.status() << "\n";
    std::exit(1);
  }
  return *std::move(value);
}

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) {
    std::cerr << "load_device_bench: " << what << ": " << status << "\n";
    std::exit(1);
  }
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The tensors' bytes of every file, as [offset, offset + bytes) runs of at most kChunk.
struct Run {
  int file = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// Preads every run, `buffers.size()` threads taking the next run each into its own pinned
// buffer (kChunk bytes); false on a short read.
bool PreadAll(const std::vector<int>& fds, const std::vector<Run>& runs,
              const std::vector<uint8_t*>& buffers) {
  std::atomic<size_t> next{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (uint8_t* const buffer : buffers) {
    threads.emplace_back([&, buffer] {
      for (size_t i = next++; i < runs.size() && ok; i = next++) {
        const Run& r = runs[i];
        for (int64_t done = 0; done < r.bytes;) {
          const ssize_t got = pread(fds[r.file], buffer, static_cast<size_t>(r.bytes - done),
                                    r.offset + done);
          if (got <= 0) {
            ok = false;
            break;
          }
          done += got;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, json_path;
  int repeat = 3;
  int readers = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--file") file = argv[i + 1];
    else if (flag == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--json") json_path = argv[i + 1];
    else if (flag == "--readers") readers = std::min(64, std::max(1, std::atoi(argv[i + 1])));
  }
  if (file.empty()) {
    std::cerr << "usage: load_device_bench --file F [--readers N] [--repeat K] [--json PATH]\n";
    return 2;
  }
  const sdrt::CheckpointSource source = Check(sdrt::CheckpointSource::Open(file), "open " + file);
  std::vector<int> fds;
  for (const sdrt::CheckpointSourceFile& f : source.files()) {
    fds.push_back(open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fds.back() < 0) Check(absl::NotFoundError(f.path), "open");
  }
  std::vector<Run> runs;
  int64_t bytes = 0;
  for (const sdrt::CheckpointSourceTensor& t : source.tensors()) {
    for (int64_t at = 0; at < t.nbytes; at += kChunk) {
      runs.push_back({t.file, t.offset + at, std::min(kChunk, t.nbytes - at)});
    }
    bytes += t.nbytes;
  }
  const sdrt::Device gpu = sdrt::Device::CUDA(0);
  std::vector<std::shared_ptr<sdrt::Storage>> pinned;
  std::vector<uint8_t*> buffers;
  for (int r = 0; r < readers; ++r) {
    pinned.push_back(Check(sdrt::PinnedHostAllocator::Allocate(kChunk, 0), "pinned buffer"));
    buffers.push_back(static_cast<uint8_t*>(pinned.back()->data()));
  }
  uint8_t* const staging = buffers[0];
  const sdrt::Tensor device_bytes =
      Check(sdrt::Tensor::Empty({std::max<int64_t>(bytes, 1)}, sdrt::DType::kUInt8, gpu), "device");
  sdrt::DeviceBackend* const backend =
      Check(sdrt::GetDeviceBackend(sdrt::DeviceType::kCUDA), "CUDA backend");
  const sdrt::CudaStream stream = Check(sdrt::CudaStream::Create(0), "stream");

  // The floors, best of `repeat` (the first pread also warms the page cache).
  double pread_s = 1e30, h2d_s = 1e30;
  for (int k = 0; k <= repeat; ++k) {
    const Clock::time_point t = Clock::now();
    if (!PreadAll(fds, runs, buffers)) Check(absl::DataLossError("short read"), "pread");
    if (k > 0) pread_s = std::min(pread_s, Since(t));
  }
  for (int k = 0; k <= repeat; ++k) {
    const Clock::time_point t = Clock::now();
    for (int64_t at = 0; at < bytes; at += kChunk) {
      Check(backend->Memcpy(static_cast<uint8_t*>(device_bytes.data_ptr()) + at, gpu, staging,
                            sdrt::Device::CPU(), std::min(kChunk, bytes - at), stream.handle(),
                            /*non_blocking=*/true),
            "cudaMemcpyAsync");
    }
    Check(stream.Synchronize(), "stream");
    if (k > 0) h2d_s = std::min(h2d_s, Since(t));
  }

  // The load: fresh CUDA locals of a mesh of one, first call and the best later one.
  auto mesh = std::make_shared<const sdrt::DeviceMesh>(
      Check(sdrt::DeviceMesh::Create({1}), "mesh"));
  const sdrt::ShardingPlan plan = Check(sdrt::ShardingPlan::Builtin("fsdp"), "plan");
  const sdrt::Map meta = Check(plan.MetaStateDict(source.TensorSpecs(), mesh, 0), "meta");
  sdrt::LoadOptions options;
  options.rank = 0;
  options.read = sdrt::ReadMode::kAll;
  options.device = gpu;
  options.strict = true;
  options.readers = readers;
  double first_s = 0, best_s = 1e30, first_plan = 0, first_staging = 0, plan_s = 0,
         staging_s = 0;
  sdrt::Map first;
  for (int k = 0; k <= repeat; ++k) {
    sdrt::Map local = meta;
    sdrt::LoadStats stats;
    options.stats = &stats;
    const Clock::time_point t = Clock::now();
    Check(sdrt::LoadStateDict(source, local, options).status(), "LoadStateDict");
    const double s = Since(t);
    if (k == 0) {
      first_s = s;
      first_plan = stats.plan_seconds;
      first_staging = stats.staging_seconds;
      first = std::move(local);
    } else if (s < best_s) {
      best_s = s;
      plan_s = stats.plan_seconds;
      staging_s = stats.staging_seconds;
    }
  }
  // Every tensor of the first load against the file's bytes.
  int64_t wrong = 0;
  std::vector<uint8_t> want;
  for (const sdrt::CheckpointSourceTensor& t : source.tensors()) {
    const sdrt::Value* v = first.Find(t.name);
    if (v == nullptr || v->kind() != sdrt::ValueKind::kDTensor) {
      ++wrong;
      continue;
    }
    const sdrt::Tensor got = Check(v->as_dtensor().local().To(sdrt::Device::CPU()), "to CPU");
    want.resize(static_cast<size_t>(t.nbytes));
    const bool read = t.nbytes == 0 || pread(fds[t.file], want.data(), want.size(), t.offset) ==
                                           static_cast<ssize_t>(want.size());
    if (!read || got.nbytes() != t.nbytes ||
        (t.nbytes > 0 && std::memcmp(got.data_ptr(), want.data(), want.size()) != 0)) {
      ++wrong;
    }
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  const nlohmann::ordered_json out = {
      {"file", file},
      {"bytes", bytes},
      {"tensors", source.tensors().size()},
      {"readers", readers},
      {"pread_gbps", gb / pread_s},
      {"h2d_gbps", gb / h2d_s},
      {"load_gbps", gb / best_s},
      {"load_to_h2d", h2d_s / best_s},
      {"first_load_seconds", first_s},
      {"first_plan_seconds", first_plan},
      {"first_staging_seconds", first_staging},
      {"load_seconds", best_s},
      {"plan_seconds", plan_s},
      {"staging_seconds", staging_s},
      {"bit_exact", wrong == 0}};
  std::cout << out.dump() << "\n";
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  for (const int fd : fds) close(fd);
  return wrong == 0 ? 0 : 1;
}
