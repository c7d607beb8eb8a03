// GatherStateDict and BroadcastStateDict on CUDA tensors over NCCL with several ranks
// (label gpu): N ranks in one process, one thread per GPU (tests/support/nccl_ranks.h),
// whenever two or more GPUs are visible; skipped with a message otherwise. The state dict
// holds DTensors on a 1-D mesh of every placement kind (uneven Shard(0) and Shard(1),
// _StridedShard, Replicate, Partial sum / avg / max, so the gather's all-gather-v, grouped
// broadcasts and all-reduces all run), a ShardedTensor with one shard per rank, a plain
// tensor and non-tensor leaves. Every result is compared byte for byte with the host's
// full tensors (the CPU path's results: gather gives back the full tensor, broadcast
// DistributeTensor's piece of it), with and without cpu_offload.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/support/nccl_ranks.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using test::RunNcclRanks;

std::string Bytes(const Tensor& t) {
  const Tensor packed = *(*t.To(Device::CPU())).Contiguous();
  return std::string(static_cast<const char*>(packed.data_ptr()), packed.nbytes());
}

// One DTensor leaf: its full tensor (exact small values, so that Partial(avg)'s sum and
// division give the values back on any number of ranks) and its placements.
struct DSpec {
  std::string name;
  Tensor full;
  const char* placements;
};

std::vector<DSpec> DSpecs(int ranks) {
  const int64_t n = ranks;
  return {
      {"uneven_rows", test::Arange({2 * n + 1, 3}, DType::kFloat32, 1), "[S(0)]"},
      {"uneven_cols", test::Arange({3, 2 * n + 3}, DType::kBFloat16, -20), "[S(1)]"},
      {"fewer_rows", test::Arange({n - 1, 2}, DType::kInt8, 3), "[S(0)]"},  // an empty shard
      {"strided", test::Arange({3 * n + 1}, DType::kFloat16, 5), "[_S(0, 2)]"},
      {"replicated", test::Arange({4}, DType::kInt64, 100), "[R]"},
      {"partial_sum", test::Arange({5, 2}, DType::kFloat32, -3), "[P(sum)]"},
      {"partial_avg", test::Arange({6}, DType::kFloat64, 7), "[P(avg)]"},
      {"partial_max", test::Arange({3}, DType::kInt32, -1), "[P(max)]"},
  };
}

std::shared_ptr<const DeviceMesh> Mesh(int ranks) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create({ranks}));
}

// A float16 ShardedTensor of [3 N + 1, 2] in ChunkShardingSpec(0) chunks, chunk q on
// rank q's GPU; `full` is its full tensor; rank `rank`'s shard holds its box of `fill`
// (the full tensor to gather, or zeros to be broadcast into).
ShardedTensor Sharded(int ranks, int rank, const Tensor& fill) {
  std::vector<RemoteDevice> placements;
  for (int q = 0; q < ranks; ++q) placements.push_back({q, Device::CUDA(q)});
  const std::vector<ShardMetadata> m = *ChunkShardingSpec(0, placements, fill.shape());
  const ShardMetadata& mine = m[rank];
  Tensor box = mine.sizes[0] == 0 ? *Tensor::Empty(mine.sizes, fill.dtype())
                                  : *fill.Narrow(0, mine.offsets[0], mine.sizes[0]);
  return *ShardedTensor::Make(fill.shape(), fill.dtype(), m,
                              {LocalShard{*box.To(Device::CUDA(rank)), mine}});
}

Tensor ShardedFull(int ranks) { return test::Arange({3 * ranks + 1, 2}, DType::kFloat16, -9); }

// Rank `rank`'s state dict to gather: its DistributeTensor pieces, on its GPU.
Map LocalStateDict(int ranks, int rank) {
  const Device gpu = Device::CUDA(rank);
  Map model;
  for (const DSpec& s : DSpecs(ranks)) {
    const DTensor d = *DistributeTensor(s.full, Mesh(ranks), *ParsePlacements(s.placements), rank);
    model.Set(s.name, Value(*DTensor::Make(*d.local().To(gpu), d.mesh(), d.placements(),
                                           d.global_shape())));
  }
  model.Set("sharded", Value(Sharded(ranks, rank, ShardedFull(ranks))));
  model.Set("plain", Value(*test::Arange({3}, DType::kFloat32, 4).To(gpu)));
  return Map{{"model", model}, {"step", 7}, {"name", "ckpt"}};
}

// `got` (the gathered state dict of rank `rank`) holds every full tensor on `device`.
void ExpectGathered(const Map& got, int ranks, int rank, Device device) {
  const Value* model_value = got.Find("model");
  ASSERT_NE(model_value, nullptr);
  const Map& model = model_value->as_map();
  for (const DSpec& s : DSpecs(ranks)) {
    const Value* v = model.Find(s.name);
    ASSERT_NE(v, nullptr) << s.name;
    ASSERT_EQ(v->kind(), ValueKind::kTensor) << s.name;
    EXPECT_EQ(v->as_tensor().device(), device) << "rank " << rank << " " << s.name;
    EXPECT_EQ(v->as_tensor().shape(), s.full.shape()) << s.name;
    EXPECT_EQ(Bytes(v->as_tensor()), Bytes(s.full)) << "rank " << rank << " " << s.name;
  }
  const Tensor& sharded = model.Find("sharded")->as_tensor();
  EXPECT_EQ(sharded.device(), device);
  EXPECT_EQ(Bytes(sharded), Bytes(ShardedFull(ranks))) << "rank " << rank << " sharded";
  EXPECT_EQ(Bytes(model.Find("plain")->as_tensor()), Bytes(test::Arange({3}, DType::kFloat32, 4)));
  EXPECT_EQ(got.Find("step")->as_int(), 7);
}

TEST(DistributedStateDictMultiGpu, GatherOnTheGpusAndOffloaded) {
  SDRT_RANKS_OR_SKIP(ranks);
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Map local = LocalStateDict(ranks, rank);
    // Buckets of 64 bytes split the state dict into many all-gather-v calls; 1 GiB is one.
    for (int64_t bucket : {int64_t{64}, int64_t{1} << 30}) {
      for (bool offload : {false, true}) {
        SCOPED_TRACE(absl::StrCat("rank ", rank, ", bucket ", bucket, offload ? ", offload" : ""));
        GatherOptions options;
        options.comm = &comm;
        options.bucket_bytes = bucket;
        options.cpu_offload = offload;
        absl::StatusOr<Map> got = GatherStateDict(local, options);
        ASSERT_TRUE(got.ok()) << got.status();
        ExpectGathered(*got, ranks, rank, offload ? Device::CPU() : Device::CUDA(rank));
      }
    }
  });
}

TEST(DistributedStateDictMultiGpu, BroadcastFromTheLastRank) {
  SDRT_RANKS_OR_SKIP(ranks);
  const int root = ranks - 1;
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Device gpu = Device::CUDA(rank);
    // Broadcast writes pieces (no Partial: a receiving rank gets its piece of the value).
    std::vector<DSpec> specs;
    for (const DSpec& s : DSpecs(ranks)) {
      if (std::string(s.placements).find("P(") == std::string::npos) specs.push_back(s);
    }
    Map full_model;
    Map local_model;
    for (const DSpec& s : specs) {
      full_model.Set(s.name, Value(*s.full.To(gpu)));
      // A meta local: the broadcast makes a fresh one on this GPU.
      const Tensor meta = *Tensor::Meta(s.full.shape(), s.full.dtype());
      local_model.Set(s.name, Value(*DistributeTensor(meta, Mesh(ranks),
                                                      *ParsePlacements(s.placements), rank)));
    }
    full_model.Set("sharded", Value(*ShardedFull(ranks).To(gpu)));
    const Tensor zeros = *Tensor::Zeros(ShardedFull(ranks).shape(), DType::kFloat16);
    local_model.Set("sharded", Value(Sharded(ranks, rank, zeros)));
    full_model.Set("plain", Value(*test::Arange({3}, DType::kFloat32, 4).To(gpu)));
    local_model.Set("plain", Value(*Tensor::Zeros({3}, DType::kFloat32, gpu)));
    const Map full = rank == root ? Map{{"model", full_model}, {"step", 7}} : Map{};
    Map local{{"model", local_model}, {"step", 0}};

    BroadcastOptions options;
    options.comm = &comm;
    options.root = root;
    options.bucket_bytes = 64;
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
    ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
    const Map& got = local.Find("model")->as_map();
    for (const DSpec& s : specs) {
      const DTensor& d = got.Find(s.name)->as_dtensor();
      const DTensor want =
          *DistributeTensor(s.full, Mesh(ranks), *ParsePlacements(s.placements), rank);
      EXPECT_EQ(d.local().device(), gpu) << "rank " << rank << " " << s.name;
      EXPECT_EQ(Bytes(d.local()), Bytes(want.local())) << "rank " << rank << " " << s.name;
    }
    const ShardedTensor& st = got.Find("sharded")->as_sharded();
    const ShardedTensor want = Sharded(ranks, rank, ShardedFull(ranks));
    EXPECT_EQ(Bytes(st.local_shards()[0].tensor), Bytes(want.local_shards()[0].tensor))
        << "rank " << rank << " sharded";
    EXPECT_EQ(Bytes(got.Find("plain")->as_tensor()), Bytes(test::Arange({3}, DType::kFloat32, 4)));
    EXPECT_EQ(local.Find("step")->as_int(), 7);
  });
}

}  // namespace
}  // namespace sdrt
