// One transfer engine (core/distributed/internal/gather_transfer.h) behind FullTensor,
// GatherShardedTensor and GatherStateDict: on the same inputs the single-tensor calls and the
// state-dict gather (in one bucket, in a bucket per tensor, and with ranks_only and
// cpu_offload) give the same bytes, and those bytes are the expected full tensor. Every
// placement kind: Shard(0), Shard(1), uneven and empty shards (3 ranks), Replicate,
// Partial(sum/avg/min/max), _StridedShard, 2-D meshes (2x2 on 4 ranks, 1xN otherwise), and
// ShardedTensors with several boxes per rank, empty boxes and uncovered elements. With
// gather_pieces_mpi_test.cc and gather_exchanges_mpi_test.cc, the binary gather_mpi_test,
// which CTest runs under `mpiexec -n N` for N = 1, 2, 3, 4.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

// The world of the binary (distributed_state_dict_test_util.h), which its main sets.
MpiCommunicator*& g_world = test::g_world;

int Rank() { return g_world->rank(); }
int Size() { return g_world->size(); }

std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

// A tensor of `shape` whose byte k is a hash of (seed, k): any misplaced byte shows.
Tensor HashedBytes(IntSpan shape, DType dtype, uint64_t seed) {
  Tensor t = *Tensor::Empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t k = 0; k < t.nbytes(); ++k) {
    uint64_t z = (seed + 1) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(k);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    p[k] = static_cast<uint8_t>(z ^ (z >> 31));
  }
  if (dtype == DType::kBool) {
    for (int64_t k = 0; k < t.nbytes(); ++k) p[k] &= 1;
  }
  return t;
}

// float32 of `shape` whose element i is (i mod 97) + step * c: exact small integers.
Tensor Counting(IntSpan shape, float step, int64_t c) {
  Tensor t = *Tensor::Empty(shape, DType::kFloat32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = static_cast<float>(i % 97) + step * static_cast<float>(c);
  }
  return t;
}

// True on every rank when no rank has failed so far in this test (one all-reduce).
bool NoRankFailed() {
  Tensor t = *Tensor::Empty({1}, DType::kInt32);
  t.data<int32_t>()[0] = ::testing::Test::HasFailure() ? 0 : 1;
  const absl::Status s = g_world->AllReduce(t, ReduceOp::kMin);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() && t.data<int32_t>()[0] == 1;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.is_contiguous() &&
         b.is_contiguous() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

// A leaf to gather, the mesh communicator FullTensor takes for it, and the full tensor
// every gather must give.
struct Case {
  std::string key;
  Value leaf;
  DeviceMeshComm* mesh_comm = nullptr;  // DTensor leaves
  Tensor want;
};

// A DTensor whose full value is `full`, without Partial placements.
Case Sharded(const std::string& key, DeviceMeshComm& mc, const Tensor& full,
             const char* placements) {
  absl::StatusOr<DTensor> dt =
      DistributeTensor(full, mc.mesh(), *ParsePlacements(placements), Rank());
  EXPECT_TRUE(dt.ok()) << key << ": " << dt.status();
  return {key, dt.ok() ? Value(*dt) : Value(), &mc, full};
}

// A DTensor with one Partial mesh dim `pd` (the other placements as given): the rank at
// coordinate c on that dim holds its piece of Counting(shape, k, c), k the dim's size, so
// the reduction over c is exact: sum k v + k^2 (k - 1) / 2, avg v + k (k - 1) / 2, min v,
// max v + k (k - 1).
Case PartialCase(const std::string& key, DeviceMeshComm& mc, IntSpan shape, const char* placements,
                 int pd) {
  std::vector<Placement> p = *ParsePlacements(placements);
  const ReduceOp op = p[pd].reduce_op();
  std::vector<Placement> unreduced = p;
  unreduced[pd] = Placement::Replicate();
  const int64_t k = mc.mesh()->shape()[pd];
  const int64_t c = mc.coordinate()[pd];
  const float step = static_cast<float>(k);
  DTensor piece = *DistributeTensor(Counting(shape, step, c), mc.mesh(), unreduced, Rank());
  absl::StatusOr<DTensor> dt =
      DTensor::Make(piece.local(), mc.mesh(), p, IntVector(shape.begin(), shape.end()));
  EXPECT_TRUE(dt.ok()) << key << ": " << dt.status();
  Tensor want = Counting(shape, 0, 0);
  const float spread = static_cast<float>(k * (k - 1) / 2);
  for (int64_t i = 0; i < want.numel(); ++i) {
    float& v = want.data<float>()[i];
    switch (op) {
      case ReduceOp::kSum:
        v = step * v + step * spread;
        break;
      case ReduceOp::kAvg:
        v = v + spread;
        break;
      case ReduceOp::kMax:
        v = v + 2 * spread;
        break;
      default:  // min
        break;
    }
  }
  return {key, dt.ok() ? Value(*dt) : Value(), &mc, want};
}

// A ShardedTensor of `shape` cut into boxes of `box` (the last ones clipped), box j on rank
// j % N, except that one box in `skip` (index into the box list; -1 none) belongs to no
// rank, and each rank lists its shards last-first. Every rank also holds an empty box.
Case BoxesCase(const std::string& key, IntSpan shape, IntSpan box, DType dtype, int64_t skip) {
  const Tensor source = HashedBytes(shape, dtype, 11 + shape[0]);
  Tensor want = *Tensor::Zeros(shape, dtype);
  std::vector<ShardMetadata> metadata;
  std::vector<LocalShard> local;
  const int ndim = static_cast<int>(shape.size());
  IntVector at(shape.size(), 0);
  int64_t j = 0;
  const auto cut = [&](const Tensor& t, IntSpan offsets, IntSpan sizes) {
    Tensor view = t;
    for (int d = 0; d < ndim; ++d) view = *view.Narrow(d, offsets[d], sizes[d]);
    return view;
  };
  while (true) {
    IntVector sizes(shape.size());
    for (int d = 0; d < ndim; ++d) sizes[d] = std::min(box[d], shape[d] - at[d]);
    const int owner = static_cast<int>(j % Size());
    if (j != skip) {
      ShardMetadata m{at, sizes, {owner, Device::CPU()}};
      metadata.push_back(m);
      EXPECT_TRUE(cut(want, at, sizes).CopyFrom(cut(source, at, sizes)).ok());
      if (owner == Rank()) {
        local.insert(local.begin(), LocalShard{*cut(source, at, sizes).Clone(), m});
      }
    }
    ++j;
    int d = ndim - 1;
    for (; d >= 0; --d) {
      at[d] += box[d];
      if (at[d] < shape[d]) break;
      at[d] = 0;
    }
    if (d < 0) break;
  }
  for (int r = 0; r < Size(); ++r) {
    IntVector sizes(shape.begin(), shape.end());
    sizes[0] = 0;
    ShardMetadata m{IntVector(shape.size(), 0), sizes, {r, Device::CPU()}};
    metadata.push_back(m);
    if (r == Rank()) local.push_back(LocalShard{*Tensor::Empty(sizes, dtype), m});
  }
  absl::StatusOr<ShardedTensor> st =
      ShardedTensor::Make(IntVector(shape.begin(), shape.end()), dtype, metadata, local);
  EXPECT_TRUE(st.ok()) << key << ": " << st.status();
  return {key, st.ok() ? Value(*st) : Value(), nullptr, want};
}

// Every case, on meshes made once per test (FullTensor splits their dim communicators).
class GatherPlanMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    const int n = Size();
    line_ = std::make_unique<DeviceMeshComm>(*DeviceMeshComm::Create(Mesh({n}), *g_world));
    const IntVector grid = n == 4 ? IntVector{2, 2} : IntVector{1, n};
    grid_ = std::make_unique<DeviceMeshComm>(*DeviceMeshComm::Create(Mesh(grid), *g_world));
  }

  std::vector<Case> Cases() {
    DeviceMeshComm& l = *line_;
    DeviceMeshComm& g = *grid_;
    std::vector<Case> c;
    c.push_back(Sharded("s0", l, HashedBytes({7, 5}, DType::kFloat32, 1), "[S(0)]"));
    c.push_back(Sharded("s1", l, HashedBytes({5, 7}, DType::kBFloat16, 2), "[S(1)]"));
    c.push_back(Sharded("s0_empty", l, HashedBytes({2, 3}, DType::kInt64, 3), "[S(0)]"));
    c.push_back(Sharded("s0_one_row", l, HashedBytes({1, 4}, DType::kUInt8, 4), "[S(0)]"));
    c.push_back(Sharded("s1_uneven", l, HashedBytes({3, 10}, DType::kFloat64, 5), "[S(1)]"));
    c.push_back(Sharded("replicate", l, HashedBytes({4, 3}, DType::kFloat16, 6), "[R]"));
    c.push_back(Sharded("strided", l, HashedBytes({9, 2}, DType::kInt32, 7), "[_S(0, 2)]"));
    c.push_back(Sharded("strided_1d", l, HashedBytes({5}, DType::kBool, 8), "[_S(0, 3)]"));
    c.push_back(Sharded("zero_rows", l, HashedBytes({0, 4}, DType::kFloat32, 9), "[S(0)]"));
    for (const char* p : {"[P(sum)]", "[P(avg)]", "[P(min)]", "[P(max)]"}) {
      c.push_back(PartialCase(absl::StrCat("partial_", p), l, {5, 3}, p, 0));
    }
    c.push_back(Sharded("grid_s0_s1", g, HashedBytes({5, 3}, DType::kFloat32, 10), "[S(0), S(1)]"));
    c.push_back(Sharded("grid_r_s0", g, HashedBytes({5, 4}, DType::kInt64, 11), "[R, S(0)]"));
    c.push_back(
        Sharded("grid_strided", g, HashedBytes({15, 5}, DType::kBFloat16, 12), "[_S(0, 2), S(0)]"));
    c.push_back(Sharded("grid_s0_s0", g, HashedBytes({3, 4}, DType::kFloat32, 13), "[S(0), S(0)]"));
    c.push_back(PartialCase("grid_partial_sum", g, {5, 4}, "[P(sum), S(1)]", 0));
    c.push_back(PartialCase("grid_partial_max", g, {6, 4}, "[S(1), P(max)]", 1));
    c.push_back(BoxesCase("boxes_2d", {6, 8}, {2, 3}, DType::kFloat32, -1));
    c.push_back(BoxesCase("boxes_uncovered", {5, 4}, {2, 2}, DType::kInt16, 1));
    c.push_back(BoxesCase("boxes_1d", {10}, {3}, DType::kBFloat16, -1));
    return c;
  }

  std::unique_ptr<DeviceMeshComm> line_, grid_;
};

// The single-tensor gather of a case (FullTensor or GatherShardedTensor).
absl::StatusOr<Tensor> GatherOne(const Case& c) {
  if (c.leaf.kind() == ValueKind::kDTensor) return FullTensor(c.leaf.as_dtensor(), *c.mesh_comm);
  return GatherShardedTensor(c.leaf.as_sharded(), *g_world);
}

TEST_F(GatherPlanMpi, SingleTensorCallsAndStateDictGatherGiveTheSameBytes) {
  const std::vector<Case> cases = Cases();
  if (!NoRankFailed()) return;
  Map sd;
  for (const Case& c : cases) sd.Set(c.key, c.leaf);
  std::vector<Tensor> single;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    absl::StatusOr<Tensor> one = GatherOne(c);
    EXPECT_TRUE(one.ok()) << one.status();
    if (!one.ok()) continue;
    EXPECT_TRUE(SameBytes(*one, c.want)) << one->ToString() << " vs " << c.want.ToString();
    single.push_back(*one);
  }
  if (!NoRankFailed()) return;
  for (const int64_t bucket_bytes : {kDefaultBucketBytes, int64_t{1}}) {
    for (const bool rank0_offload : {false, true}) {
      SCOPED_TRACE(absl::StrCat("bucket_bytes ", bucket_bytes, rank0_offload ? ", rank 0" : ""));
      GatherOptions options;
      options.comm = g_world;
      options.bucket_bytes = bucket_bytes;
      if (rank0_offload) {
        options.ranks_only = {0};
        options.cpu_offload = true;
      }
      absl::StatusOr<Map> gathered = GatherStateDict(sd, options);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      if (rank0_offload && Rank() != 0) {
        EXPECT_TRUE(gathered->empty());
        continue;
      }
      for (size_t i = 0; i < cases.size(); ++i) {
        const Value* v = gathered->Find(cases[i].key);
        ASSERT_NE(v, nullptr) << cases[i].key;
        ASSERT_EQ(v->kind(), ValueKind::kTensor) << cases[i].key;
        EXPECT_TRUE(SameBytes(v->as_tensor(), single[i])) << cases[i].key;
      }
    }
  }
}

// The collectives GatherStateDict issues for the same state dict: the agreement (carrying
// the ShardedTensors' boxes), a second one on the plan made from them, one all-reduce per
// DTensor with a Partial mesh dim of more than one rank, the exchanges (one when everything
// fits in a bucket) and the closing.
TEST_F(GatherPlanMpi, StateDictGatherCountsItsCollectives) {
  const std::vector<Case> cases = Cases();
  if (!NoRankFailed()) return;
  Map sd;
  int64_t reductions = 0, gathered_items = 0;
  for (const Case& c : cases) {
    sd.Set(c.key, c.leaf);
    if (c.leaf.kind() == ValueKind::kShardedTensor) {
      ++gathered_items;
      continue;
    }
    const DTensor& d = c.leaf.as_dtensor();
    const std::vector<int> order = *MeshDimsToReplicate(*d.mesh(), d.placements());
    for (int i : order) {
      if (d.placements()[i].is_partial()) ++reductions;
    }
    if (NumShards(*d.mesh(), d.placements()) > 1) ++gathered_items;
  }
  for (const int64_t bucket_bytes : {kDefaultBucketBytes, int64_t{1}}) {
    TransferStats stats;
    GatherOptions options;
    options.comm = g_world;
    options.bucket_bytes = bucket_bytes;
    options.stats = &stats;
    ASSERT_TRUE(GatherStateDict(sd, options).ok());
    if (Size() > 1 && bucket_bytes == kDefaultBucketBytes) {
      // One point-to-point exchange, and one broadcast of the tensors one rank holds alone.
      EXPECT_GE(stats.exchanges, 1) << bucket_bytes;
      EXPECT_LE(stats.exchanges, 2) << bucket_bytes;
    } else if (Size() > 1) {
      EXPECT_GE(stats.exchanges, gathered_items > 0 ? 2 : 0) << bucket_bytes;
    }
    const int64_t closing = stats.exchanges > 0 || reductions > 0 ? 1 : 0;
    EXPECT_EQ(stats.collectives, 1 + 1 + reductions + stats.exchanges + closing) << bucket_bytes;
  }
}

// Partial DTensors reduce in buckets (internal/engine/partial_reduce.h): the tensors of one mesh,
// dtype and reduction share all-reduces, consecutive ones up to the bucket size, whatever
// leaves lie between them. On the line mesh: 12 [P(sum)] float32 tensors of 60 bytes, 6
// [P(max)] float32 tensors of 16 bytes between them, and Shard(0) tensors among both; on
// the grid, [P(sum), S(1)] tensors whose pieces are uneven at 3 ranks. Every value is
// PartialCase's exact one, and the collectives are the agreement, one all-reduce per
// bucket of each group (bucket_bytes 1: one per tensor; 128: two sums or all six maxima per
// bucket) and the gather's own.
TEST_F(GatherPlanMpi, PartialsReduceInBucketsOfConsecutiveTensors) {
  std::vector<Case> cases;
  for (int k = 0; k < 12; ++k) {
    cases.push_back(PartialCase(absl::StrCat("sum_", k), *line_, {5, 3}, "[P(sum)]", 0));
    if (k % 2 == 0) {
      cases.push_back(PartialCase(absl::StrCat("max_", k), *line_, {4}, "[P(max)]", 0));
    }
    if (k % 4 == 0) {
      cases.push_back(Sharded(absl::StrCat("s0_", k), *line_,
                              HashedBytes({7, 2}, DType::kFloat32, 20 + k), "[S(0)]"));
    }
  }
  Map line_sd;
  for (const Case& c : cases) line_sd.Set(c.key, c.leaf);
  std::vector<Case> grid_cases = cases;
  for (int k = 0; k < 3; ++k) {
    grid_cases.push_back(
        PartialCase(absl::StrCat("grid_sum_", k), *grid_, {5, 5}, "[P(sum), S(1)]", 0));
  }
  Map grid_sd;
  for (const Case& c : grid_cases) grid_sd.Set(c.key, c.leaf);
  if (!NoRankFailed()) return;
  for (const auto& [bucket_bytes, reductions] :
       {std::pair<int64_t, int64_t>{1, 18}, {128, 7}, {kDefaultBucketBytes, 2}}) {
    SCOPED_TRACE(absl::StrCat("bucket_bytes ", bucket_bytes));
    for (const bool grid : {false, true}) {
      TransferStats stats;
      GatherOptions options;
      options.comm = g_world;
      options.bucket_bytes = bucket_bytes;
      options.stats = &stats;
      absl::StatusOr<Map> gathered = GatherStateDict(grid ? grid_sd : line_sd, options);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      for (const Case& c : grid ? grid_cases : cases) {
        const Value* v = gathered->Find(c.key);
        ASSERT_NE(v, nullptr) << c.key;
        ASSERT_EQ(v->kind(), ValueKind::kTensor) << c.key;
        EXPECT_TRUE(SameBytes(v->as_tensor(), c.want)) << c.key;
      }
      // A mesh dim of one rank needs no reduction (MeshDimsToReplicate leaves it out).
      if (!grid) {
        const int64_t reduced = Size() > 1 ? reductions : 0;
        const int64_t closing = stats.exchanges > 0 || reduced > 0 ? 1 : 0;
        EXPECT_EQ(stats.collectives, 1 + reduced + stats.exchanges + closing);
      }
    }
  }
  // The local tensors are not reduced in place: gathering again gives the same values.
  GatherOptions options;
  options.comm = g_world;
  absl::StatusOr<Map> again = GatherStateDict(line_sd, options);
  ASSERT_TRUE(again.ok()) << again.status();
  for (const Case& c : cases) {
    EXPECT_TRUE(SameBytes(again->Find(c.key)->as_tensor(), c.want)) << c.key;
  }
}


// A repeated gather or broadcast reuses the route of an equal call (the route cache,
// internal/engine/route_cache.h, keyed by what each verb's request says of its tensors);
// the same name in another layout (placements, a mesh of the same ranks in another order,
// a Partial that is reduced first) must get its own route. Each layout twice, so the second
// call of each runs on a cached route.
TEST(GatherAndBroadcastMpi, AgainInAnotherLayoutUnderTheSameNames) {
  const Tensor w = HashedBytes({12, 4}, DType::kFloat32, 5);
  std::vector<int64_t> reversed_ranks(static_cast<size_t>(Size()));
  for (int r = 0; r < Size(); ++r) reversed_ranks[static_cast<size_t>(r)] = Size() - 1 - r;
  const auto reversed = std::make_shared<const DeviceMesh>(
      *DeviceMesh::Create(IntVector{Size()}, reversed_ranks));
  for (const auto& mesh : {Mesh(IntVector{Size()}), reversed}) {
    for (const char* text : {"[S(0)]", "[S(1)]", "[R]", "[_S(0, 2)]", "[P(sum)]", "[S(0)]"}) {
      const std::vector<Placement> p = *ParsePlacements(text);
      for (int repeat = 0; repeat < 2; ++repeat) {
        SCOPED_TRACE(absl::StrCat(mesh->ToString(), " ", text, " call ", repeat));
        const internal::RouteCacheCounts before = internal::RouteCacheCountsNow();
        // Gather: a Partial(sum) local is the value on the rank at coordinate 0, zeros
        // elsewhere, so every layout gathers to w.
        Map sd;
        if (p[0].is_partial()) {
          const bool first = mesh->Coordinate(Rank())->at(0) == 0;
          const Tensor local = first ? w : *Tensor::Zeros(w.shape(), w.dtype());
          sd.Set("w", Value(*DTensor::Make(local, mesh, p, w.shape())));
        } else {
          sd.Set("w", Value(*DistributeTensor(w, mesh, p, Rank())));
        }
        GatherOptions gather;
        gather.comm = g_world;
        absl::StatusOr<Map> full = GatherStateDict(sd, gather);
        ASSERT_TRUE(full.ok()) << full.status();
        EXPECT_TRUE(SameBytes(full->Find("w")->as_tensor(), w));
        if (Size() > 1 && repeat == 1 && !p[0].is_replicate() && !p[0].is_partial()) {
          EXPECT_GT(internal::RouteCacheCountsNow().hits, before.hits);
        }
        if (p[0].is_partial()) continue;
        // Broadcast from the last rank into a meta DTensor of this layout.
        Map local;
        const DTensor want = *DistributeTensor(w, mesh, p, Rank());
        local.Set("w", Value(*DTensor::Make(*Tensor::Meta(want.local().shape(), w.dtype()),
                                            mesh, p, w.shape())));
        Map source;
        if (Rank() == Size() - 1) source.Set("w", Value(w));
        BroadcastOptions broadcast;
        broadcast.comm = g_world;
        broadcast.root = Size() - 1;
        ASSERT_TRUE(BroadcastStateDict(source, local, broadcast).ok());
        EXPECT_TRUE(SameBytes(local.Find("w")->as_dtensor().local(), want.local()));
      }
    }
  }
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
