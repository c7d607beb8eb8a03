// GPU tests of LoadStateDict (core/distributed/load_state_dict.h) into CUDA locals (label
// gpu; each test skips without a CUDA device). No communicator: one process plays every
// rank of 2- and 3-rank meshes in turn (LoadOptions::rank), reading a file it wrote, and
// each CUDA piece is compared byte for byte with DistributeTensor of the full tensor on
// the CPU. The staging is pinned and double buffered: tiny staging buffers (4 KiB) make
// every buffer refilled many times, so a refill that did not wait for its device copies
// shows as wrong bytes; fsdp pieces move with cudaMemcpyAsync, tp (Shard(1)) pieces with
// cudaMemcpy2DAsync out of the rows read through their gaps, a 3-D Shard(1) piece as one
// pitched copy per outer index, and a strided CUDA local (a narrow of a larger buffer) is
// filled in place.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

const Device kGpu = Device::CUDA(0);

struct Case {
  std::string name;
  IntVector shape;
  DType dtype;
  const char* placements;
};

std::vector<Case> Cases() {
  return {
      {"fsdp.w", {37, 64}, DType::kBFloat16, "[S(0)]"},
      {"fsdp.uneven", {7, 5}, DType::kFloat32, "[S(0)]"},
      {"tp.col", {40, 96}, DType::kFloat32, "[S(1)]"},
      {"tp.narrow_col", {50, 3}, DType::kInt64, "[S(1)]"},
      {"tp.mid", {4, 9, 16}, DType::kFloat16, "[S(1)]"},
      {"strided", {11, 8}, DType::kUInt8, "[_S(0, 2)]"},
      {"replicated", {33}, DType::kFloat64, "[R]"},
  };
}

std::string Bytes(const Tensor& t) {
  const Tensor cpu = *t.To(Device::CPU());
  const Tensor packed = *cpu.Contiguous();
  return std::string(static_cast<const char*>(packed.data_ptr()), packed.nbytes());
}

class LoadStateDictGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SDRT_SKIP_WITHOUT_GPU();
    path_ = absl::StrCat(test::TestTmpRoot(), "/load_state_dict_gpu_test.safetensors");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Case& c : Cases()) {
      fulls_.push_back(test::FiniteBytes(c.shape, c.dtype, static_cast<int64_t>(fulls_.size())));
      tensors.emplace_back(c.name, fulls_.back());
    }
    ASSERT_TRUE(WriteSafetensors(path_, tensors).ok());
  }

  // Loads every case into rank `rank` of a mesh of `ranks`, with locals made by `make`, and
  // checks each piece against the CPU's DistributeTensor.
  // With `in_place`, each local must still be the tensor `make` returned (same address).
  template <typename MakeLocal>
  void LoadAndCheck(int ranks, int rank, const LoadOptions& base, MakeLocal make,
                    const std::vector<const void*>* in_place = nullptr) {
    absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path_);
    ASSERT_TRUE(source.ok()) << source.status();
    auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create(IntVector{ranks}));
    const std::vector<Case> cases = Cases();
    Map local;
    for (const Case& c : cases) {
      const std::vector<Placement> p = *ParsePlacements(c.placements);
      local.Set(c.name, Value(make(c, mesh, p)));
    }
    LoadOptions options = base;
    options.rank = rank;
    LoadStats stats;
    options.stats = &stats;
    absl::StatusOr<LoadResult> result = LoadStateDict(*source, local, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_LE(stats.peak_staging_bytes, options.staging_buffers * (options.staging_bytes + 16));
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SCOPED_TRACE(absl::StrCat(c.name, " ", c.placements, " rank ", rank, " of ", ranks));
      const std::vector<Placement> p = *ParsePlacements(c.placements);
      const DTensor want = *DistributeTensor(fulls_[i], mesh, p, rank);
      const DTensor& got = local.Find(c.name)->as_dtensor();
      EXPECT_EQ(got.local().device(), kGpu);
      EXPECT_EQ(got.local().shape(), want.local().shape());
      EXPECT_EQ(Bytes(got.local()), Bytes(want.local()));
      if (in_place != nullptr) {
        EXPECT_EQ(got.local().data_ptr(), (*in_place)[i]);
      }
    }
  }

  std::string path_;
  std::vector<Tensor> fulls_;
};

TEST_F(LoadStateDictGpuTest, MetaLocalsBecomeCudaPiecesEqualToTheCpuSlices) {
  for (int ranks : {2, 3}) {
    for (int rank = 0; rank < ranks; ++rank) {
      LoadOptions options;
      options.device = kGpu;
      options.staging_bytes = 4096;  // many refills of both buffers
      LoadAndCheck(ranks, rank, options, [&](const Case& c, auto mesh, const auto& p) {
        const IntVector shape = *ComputeLocalShape(c.shape, *mesh, p, rank);
        return *DTensor::Make(*Tensor::Meta(shape, c.dtype), mesh, p, c.shape);
      });
    }
  }
}

TEST_F(LoadStateDictGpuTest, PreallocatedAndStridedCudaLocalsAreFilledInPlace) {
  for (int buffers : {1, 3}) {
    LoadOptions options;
    options.staging_buffers = buffers;
    options.staging_bytes = 4096;
    std::vector<const void*> addresses;
    LoadAndCheck(3, 1, options, [&](const Case& c, auto mesh, const auto& p) {
      const IntVector shape = *ComputeLocalShape(c.shape, *mesh, p, 1);
      Tensor local = *Tensor::Zeros(shape, c.dtype, kGpu);
      if (shape.size() == 2 && shape[1] > 0) {  // a narrow of a wider CUDA buffer
        Tensor wide = *Tensor::Zeros(IntVector{shape[0], shape[1] + 3}, c.dtype, kGpu);
        local = *wide.Narrow(1, 2, shape[1]);
      }
      addresses.push_back(local.data_ptr());
      return *DTensor::Make(local, mesh, p, c.shape);
    }, &addresses);
  }
}

}  // namespace
}  // namespace sdrt
