// The weight map's FP8 destinations and sources on a GPU (one rank, through a one-rank NCCL
// communicator; label gpu, each test skips without a device), against PyTorch: the golden
// of make_fp8_map_golden.py (tests/data/fp8_map/expected.json), its tp-1 cases (block
// scales f32 / e8m0, e5m2 codes, one scale per tensor). A trainer's bf16 tensors on the GPU
// synced into the engine's FP8 buffers on the GPU with the vllm-llama map (the sender's
// amax, its codes packed into device buckets: cuda/fp8_kernels.h), one-shot and bound twice;
// the same tensors loaded from a file into GPU buffers (quantized on the device after the
// read); and an FP8 checkpoint loaded into bf16 GPU buffers (dequantized on the device),
// equal to the CPU's load of it. The suite's name starts with Nccl (scripts/device-check.sh
// runs it with the NCCL tests).
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/distributed/fp8_map_test_util.h"
#include "sdrt/tests/support/nccl_single_rank.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using namespace ::sdrt::testing_fp8_map;  // NOLINT: the FP8 test helpers

const Device kGpu = Device::CUDA(0);

std::shared_ptr<const DeviceMesh> MeshOfOne() {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}));
}

Tensor OnCpu(const Tensor& t) { return *(*t.To(Device::CPU())).Contiguous(); }

// A GPU DTensor of `shape` over the mesh of one, 0xFF bytes.
Value GpuBuffer(const IntVector& shape, DType dtype, const char* placements) {
  Tensor local = *Tensor::Empty(shape, dtype);
  if (local.nbytes() > 0) std::memset(local.data_ptr(), 0xFF, local.nbytes());
  return Value(*DTensor::Make(*local.To(kGpu), MeshOfOne(), *ParsePlacements(placements), shape));
}

// The engine's FP8 buffers of tp-1 case `c` on the GPU, with their scales.
Map GpuEngine(const json& c) {
  const json& mine = c["ranks"][0];
  const bool block = c["block"].get<int64_t>() > 0;
  const DType scale = c["scale_format"] == "e8m0" ? DType::kFloat8E8M0FNU : DType::kFloat32;
  Map engine;
  for (const char* key : kDestinations) {
    const bool fused = std::string(key) == "qkv_proj" || std::string(key) == "gate_up_proj";
    const char* placements = fused ? "[S(0)]" : "[S(1)]";
    engine.Set(HfName(key),
               GpuBuffer(mine[key]["codes_shape"].get<IntVector>(), CodesDType(c), placements));
    engine.Set(HfName(key) + (block ? "_scale_inv" : "_scale"),
               GpuBuffer(mine[key]["scales_shape"].get<IntVector>(), scale,
                         block ? placements : "[R]"));
  }
  return engine;
}

void ExpectGoldenOnGpu(const json& c, const Map& engine, const std::string& what) {
  const json& mine = c["ranks"][0];
  const bool block = c["block"].get<int64_t>() > 0;
  for (const char* key : kDestinations) {
    SCOPED_TRACE(absl::StrCat(c["name"].get<std::string>(), " ", what, " ", key));
    const Value* codes = engine.Find(HfName(key));
    const Value* scales = engine.Find(HfName(key) + (block ? "_scale_inv" : "_scale"));
    ASSERT_TRUE(codes != nullptr && scales != nullptr);
    EXPECT_EQ(codes->as_dtensor().local().device(), kGpu);
    EXPECT_EQ(Fnv(OnCpu(codes->as_dtensor().local())), mine[key]["codes_fnv"].get<std::string>());
    EXPECT_EQ(Raw(OnCpu(scales->as_dtensor().local())),
              mine[key]["scales"].get<std::vector<int64_t>>());
  }
}

std::vector<const json*> TpOneCases() {
  std::vector<const json*> out;
  for (const json& c : Golden()["cases"]) {
    if (c["tp"] == 1) out.push_back(&c);
  }
  return out;
}

TEST(NcclFp8MapGpu, TrainerOnTheGpuIntoFp8GpuBuffersIsPyTorchs) {
  SDRT_SKIP_WITHOUT_GPU();
  ASSERT_FALSE(Golden().is_null());
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  Map trainer;
  for (const auto& [key, full] : Sources()) {
    trainer.Set(HfName(key), Value(*DistributeTensor(*full.To(kGpu), MeshOfOne(),
                                                     *ParsePlacements("[S(0)]"), 0)));
  }
  ReshardOptions options;
  options.comm = comm.get();
  options.weight_map = *WeightMap::Builtin("vllm-llama", 128);
  options.bucket_bytes = 64 << 10;  // many device buckets
  const std::vector<const json*> cases = TpOneCases();
  ASSERT_EQ(cases.size(), 4u);
  for (const json* c : cases) {
    Map engine = GpuEngine(*c);
    const absl::Status one_shot = ReshardStateDict(trainer, engine, options);
    ASSERT_TRUE(one_shot.ok()) << (*c)["name"] << ": " << one_shot;
    ExpectGoldenOnGpu(*c, engine, "one-shot");
    // Bound: the same buffers written afresh, twice.
    Map bound_engine = GpuEngine(*c);
    const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, bound_engine, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<BoundReshard> sync = BindReshard(*plan, trainer, bound_engine);
    ASSERT_TRUE(sync.ok()) << sync.status();
    for (int step = 0; step < 2; ++step) {
      for (const char* key : kDestinations) {
        Tensor local = bound_engine.Find(HfName(key))->as_dtensor().local();
        ASSERT_TRUE(local.CopyFrom(*Tensor::Zeros(local.shape(), local.dtype())).ok());
      }
      const absl::Status executed = sync->Execute();
      ASSERT_TRUE(executed.ok()) << executed;
      ExpectGoldenOnGpu(*c, bound_engine, absl::StrCat("bound step ", step));
    }
  }
}

TEST(NcclFp8MapGpu, LoadsQuantizeAndDequantizeOnTheGpu) {
  SDRT_SKIP_WITHOUT_GPU();
  ASSERT_FALSE(Golden().is_null());
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const std::string dir = absl::StrCat(test::TestTmpRoot(), "/fp8_map_gpu_test");
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> bf16;
  for (const auto& [key, t] : Sources()) bf16.emplace_back(HfName(key), t);
  ASSERT_TRUE(WriteSafetensors(dir + "/bf16.safetensors", bf16).ok());
  LoadOptions options;
  options.comm = comm.get();
  options.read = ReadMode::kAll;
  options.weight_map = *WeightMap::Builtin("vllm-llama", 128);
  for (const json* c : TpOneCases()) {
    // bf16 file -> FP8 GPU buffers: quantized on the device after the read.
    Map engine = GpuEngine(*c);
    const absl::StatusOr<LoadResult> loaded =
        LoadStateDict(CheckpointSource::Open(dir + "/bf16.safetensors"), engine, options);
    ASSERT_TRUE(loaded.ok()) << (*c)["name"] << ": " << loaded.status();
    ExpectGoldenOnGpu(*c, engine, "loaded");
    // That engine's FP8 buffers saved as a checkpoint, loaded back into bf16 GPU buffers
    // (dequantized on the device) and into bf16 CPU buffers: the same bytes.
    std::vector<std::pair<std::string, Tensor>> fp8;
    for (size_t k = 0; k < engine.size(); ++k) {
      fp8.emplace_back(engine.key(k), OnCpu(engine.value(k).as_dtensor().local()));
    }
    ASSERT_TRUE(WriteSafetensors(dir + "/fp8.safetensors", fp8).ok());
    Map gpu_values, cpu_values;
    for (const char* key : kDestinations) {
      const IntVector shape = engine.Find(HfName(key))->as_dtensor().local().shape();
      gpu_values.Set(HfName(key), GpuBuffer(shape, DType::kBFloat16, "[R]"));
      cpu_values.Set(HfName(key), Value(*Tensor::Zeros(shape, DType::kBFloat16)));
    }
    LoadOptions plain;
    plain.comm = comm.get();
    plain.read = ReadMode::kAll;
    const absl::StatusOr<LoadResult> on_gpu =
        LoadStateDict(CheckpointSource::Open(dir + "/fp8.safetensors"), gpu_values, plain);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
    const absl::StatusOr<LoadResult> on_cpu =
        LoadStateDict(CheckpointSource::Open(dir + "/fp8.safetensors"), cpu_values, plain);
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
    for (const char* key : kDestinations) {
      SCOPED_TRACE(absl::StrCat((*c)["name"].get<std::string>(), " dequantized ", key));
      const Tensor got = OnCpu(gpu_values.Find(HfName(key))->as_dtensor().local());
      const Tensor want = cpu_values.Find(HfName(key))->as_tensor();
      ASSERT_EQ(got.nbytes(), want.nbytes());
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), got.nbytes()), 0);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sdrt
