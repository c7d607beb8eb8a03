// GPU tests of LoadStateDict (core/distributed/load_state_dict.h) into CUDA locals (label
// gpu; each test skips without a CUDA device). No communicator: one process plays every
// rank of 2- and 3-rank meshes in turn (LoadOptions::rank), reading a file it wrote, and
// each CUDA piece is compared byte for byte with DistributeTensor of the full tensor on
// the CPU. The staging is pinned and double buffered: tiny staging buffers (4 KiB) make
// every buffer refilled many times, so a refill that did not wait for its device copies
// shows as wrong bytes (with one buffer, two, and two reader threads, which enqueue a
// buffer's planned copies before refilling it); the copies are those of
// internal/load/device_copies.h: fsdp pieces and whole tensors joined into 1-D copies, tp
// (Shard(1)) rows into one copy per buffer, a 3-D Shard(1) piece's rows likewise, a strided
// CUDA local (a narrow of a larger buffer: rows apart) filled in place by 2-D copies, bf16
// at odd file offsets as byte copies. A second load reuses the pinned buffers of the first
// (PinnedStagingBuffers), and work pending on the legacy default stream runs before the
// load writes.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/internal/load/device_staging.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"
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

TEST_F(LoadStateDictGpuTest, ReaderThreadsFlushTheBuffersTheyRefill) {
  LoadOptions options;
  options.device = kGpu;
  options.staging_bytes = 4096;
  options.readers = 2;  // three buffers, refilled by two threads
  for (int rank = 0; rank < 2; ++rank) {
    LoadAndCheck(2, rank, options, [&](const Case& c, auto mesh, const auto& p) {
      const IntVector shape = *ComputeLocalShape(c.shape, *mesh, p, rank);
      return *DTensor::Make(*Tensor::Meta(shape, c.dtype), mesh, p, c.shape);
    });
  }
}

TEST_F(LoadStateDictGpuTest, ASecondLoadReusesThePinnedStagingBuffers) {
  LoadOptions options;
  options.device = kGpu;
  options.staging_bytes = 4096;
  const auto meta = [&](const Case& c, auto mesh, const auto& p) {
    const IntVector shape = *ComputeLocalShape(c.shape, *mesh, p, 0);
    return *DTensor::Make(*Tensor::Meta(shape, c.dtype), mesh, p, c.shape);
  };
  LoadAndCheck(2, 0, options, meta);
  const internal::BufferCache::Counters before = internal::PinnedStagingBuffers().counters();
  EXPECT_GE(before.kept_buffers, options.staging_buffers);
  LoadAndCheck(2, 0, options, meta);
  const internal::BufferCache::Counters after = internal::PinnedStagingBuffers().counters();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.reuses - before.reuses, options.staging_buffers);
  EXPECT_LE(after.kept_bytes, internal::kKeptPinnedStagingBytes);
}

TEST_F(LoadStateDictGpuTest, WorkPendingOnTheDefaultStreamRunsBeforeTheLoad) {
  // Each local is set to 0xFF on the legacy default stream behind memsets of a 1 GiB
  // scratch buffer, and the load starts at once: its copies must land after the 0xFF.
  DeviceBackend* const backend = *GetDeviceBackend(DeviceType::kCUDA);
  const Tensor scratch = *Tensor::Empty({int64_t{1} << 30}, DType::kUInt8, kGpu);
  LoadOptions options;
  options.staging_bytes = 4096;
  LoadAndCheck(2, 1, options, [&](const Case& c, auto mesh, const auto& p) {
    const IntVector shape = *ComputeLocalShape(c.shape, *mesh, p, 1);
    Tensor local = *Tensor::Empty(shape, c.dtype, kGpu);
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(backend->Memset(scratch.data_ptr(), static_cast<uint8_t>(i), scratch.nbytes(),
                                  kGpu, nullptr, /*non_blocking=*/true).ok());
    }
    EXPECT_TRUE(
        backend->Memset(local.data_ptr(), 0xFF, local.nbytes(), kGpu, nullptr, true).ok());
    return *DTensor::Make(local, mesh, p, c.shape);
  });
}

TEST_F(LoadStateDictGpuTest, Bf16AtOddFileOffsetsIsCopiedByBytes) {
  // "b" (bf16 [4, 6]) sits at an odd byte of the file with one header length, at an even
  // one with the other; loaded whole (a fresh CUDA tensor) and as Shard(1) rows.
  const std::string path = absl::StrCat(test::TestTmpRoot(), "/load_gpu_unaligned.safetensors");
  std::string data(50, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
  const std::string json =
      R"({"o":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"BF16",)"
      R"("shape":[4,6],"data_offsets":[1,49]},"x":{"dtype":"U8","shape":[1],)"
      R"("data_offsets":[49,50]}})";
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create(IntVector{2}));
  const std::vector<Placement> s1 = *ParsePlacements("[S(1)]");
  for (int pad = 0; pad < 2; ++pad) {
    SCOPED_TRACE(absl::StrCat("pad ", pad));
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << test::Image(json + std::string(pad, ' '), data);
    const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path);
    ASSERT_TRUE(source.ok()) << source.status();
    Map local;
    local.Set("b", Value(*Tensor::Zeros({4, 6}, DType::kBFloat16)));
    Map piece;
    piece.Set("b", Value(*DTensor::Make(*Tensor::Meta({4, 3}, DType::kBFloat16), mesh, s1,
                                        IntVector{4, 6})));
    LoadOptions options;
    options.device = kGpu;
    ASSERT_TRUE(LoadStateDict(*source, local, options).ok());
    options.rank = 1;
    ASSERT_TRUE(LoadStateDict(*source, piece, options).ok());
    EXPECT_EQ(Bytes(local.Find("b")->as_tensor()), data.substr(1, 48));
    std::string rows;  // columns 3..5 of each row: 6 of its 12 bytes
    for (int r = 0; r < 4; ++r) rows += data.substr(1 + r * 12 + 6, 6);
    EXPECT_EQ(Bytes(piece.Find("b")->as_dtensor().local()), rows);
  }
}

}  // namespace
}  // namespace sdrt
