// LoadStateDict reading once per node (LoadOptions::share_reads, internal/load/node_reads.h)
// over MPI, 1..4 ranks on one machine: the locals equal those of the load where every rank
// reads its own bytes, for every kind of leaf (shared or not); what ranks of one node keep
// alike is read from the file once per node (bytes read summed over the ranks = the distinct
// bytes times the nodes, with node_of_rank making one machine two nodes; replicas of every
// rank, and hsdp's replica pairs; an engine's strided buffers in place); the rest is
// received from the readers
// (LoadStats::bytes_from_node); a bad node_of_rank is the same error on every rank. A
// pipelined layout (ParallelLayout), whose ranks list their own stage's tensors on meshes of
// the stage's ranks, is read by every rank alone and refused by reading once per node.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {

// The folders WriteFile made (rank 0's), removed when the tests end.
std::vector<std::string>& Made() {
  static auto* made = new std::vector<std::string>();
  return *made;
}

namespace {

using ::testing::HasSubstr;

// Rank 0 writes `specs`' full tensors as one safetensors file in a fresh folder; every rank
// returns its path once it is written.
std::string WriteFile(const std::vector<Spec>& specs) {
  std::string path;
  if (Rank() == 0) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/sdrt_node_XXXXXX");
    const char* dir = mkdtemp(pattern.data());
    if (dir != nullptr) Made().push_back(dir);
    path = dir != nullptr ? absl::StrCat(dir, "/model.safetensors") : "";
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Spec& s : specs) tensors.emplace_back(s.path, s.Full());
    EXPECT_TRUE(WriteSafetensors(path, tensors).ok());
  }
  EXPECT_TRUE(g_world->BroadcastBytes(&path, 0).ok());
  return path;
}

Map Tree(const std::vector<Spec>& specs, const LeafFn& leaf) {
  Map m;
  for (const Spec& s : specs) m.Set(s.path, leaf(s));
  return m;
}

// `mine` summed over the ranks.
int64_t Sum(int64_t mine) {
  absl::StatusOr<std::vector<std::string>> all =
      g_world->AllGatherBytes(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  EXPECT_TRUE(all.ok()) << all.status();
  int64_t sum = 0;
  for (const std::string& bytes : all.ok() ? *all : std::vector<std::string>()) {
    int64_t theirs = 0;
    std::memcpy(&theirs, bytes.data(), std::min(bytes.size(), sizeof(theirs)));
    sum += theirs;
  }
  return sum;
}

// What the ranks keep alike (Replicate, plain and 0-dim leaves: shared), what each keeps of
// its own (Shard; Partial and ShardedTensor leaves, which are never shared).
std::vector<Spec> Specs() {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  return {
      DSpec("replicated.a", {9, 4}, DType::kFloat32, m1, "[R]"),
      DSpec("fsdp", {7, 5}, DType::kFloat32, m1, "[S(0)]"),
      DSpec("replicated.b", {33}, DType::kBFloat16, m1, "[R]"),
      DSpec("tp.col", {6, 9}, DType::kFloat32, m1, "[S(1)]"),
      PlainSpec("plain", {3, 3}, DType::kFloat32),
      DSpec("partial", {3, 4}, DType::kFloat32, m1, "[P(sum)]"),
      DSpec("dtensor_0dim", {}, DType::kFloat32, m1, "[R]"),
      SSpec("sharded", {10, 4}, DType::kFloat32, ChunkShards(IntVector{10, 4}, 0)),
      DSpec("replicated.c", {5, 3}, DType::kInt64, m1, "[R]"),
  };
}

// Bytes of the tensors every rank fills alike when the leaves are `leaf`'s: Replicate
// DTensors (fresh or preallocated locals), plain and 0-dim leaves (None takes nothing).
int64_t SharedBytes(const std::vector<Spec>& specs, const LeafFn& leaf) {
  int64_t bytes = 0;
  for (const Spec& s : specs) {
    const Value v = leaf(s);
    const bool replica = v.kind() == ValueKind::kDTensor && s.path.rfind("replicated", 0) == 0;
    const bool replaced = !v.is_none() && (s.shape.empty() || s.kind == Spec::Kind::kPlain);
    if (replica || replaced) bytes += s.Full().nbytes();
  }
  return bytes;
}

TEST(LoadNodeReadsMpiTest, SameLocalsReadOncePerNode) {
  const std::vector<Spec> specs = Specs();
  const std::string file = WriteFile(specs);
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(file);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  const int n = WorldSize();
  // One node (the host names), and the machine cut into nodes of two ranks.
  std::vector<std::vector<int64_t>> layouts = {{}};
  std::vector<int64_t> pairs;
  for (int q = 0; q < n; ++q) pairs.push_back(100 + q / 2);
  layouts.push_back(pairs);
  for (const LeafFn& leaf : {LeafFn(MetaLeaf), LeafFn(ZeroLeaf)}) {
    Map own = Tree(specs, leaf);
    LoadStats own_stats;
    LoadOptions options;
    options.comm = g_world;
    options.stats = &own_stats;
    ASSERT_TRUE(AllTrue(LoadStateDict(*source, own, options).ok()));
    for (const std::vector<int64_t>& node_of_rank : layouts) {
      SCOPED_TRACE(node_of_rank.empty() ? "host names" : "pairs");
      Map shared = Tree(specs, leaf);
      LoadStats stats;
      options.stats = &stats;
      options.share_reads = true;
      options.node_of_rank = node_of_rank;
      absl::StatusOr<LoadResult> l = LoadStateDict(*source, shared, options);
      ASSERT_TRUE(AllTrue(l.ok())) << l.status();
      ExpectTreeEq(Value(shared), Value(own), "");
      EXPECT_EQ(stats.bytes_kept, own_stats.bytes_kept);
      const int nodes = node_of_rank.empty() ? 1 : (n + 1) / 2;
      // Every rank kept the shared bytes; one per node read them, the others received them.
      EXPECT_EQ(Sum(stats.bytes_from_node), n > 1 ? (n - nodes) * SharedBytes(specs, leaf) : 0);
      EXPECT_EQ(Sum(stats.bytes_read) + Sum(stats.bytes_from_node), Sum(own_stats.bytes_read));
      EXPECT_EQ(stats.node, node_of_rank.empty() ? 0 : Rank() / 2);
      ASSERT_TRUE(NoRankFailed());
    }
  }
}

// Data-parallel replicas: every tensor Replicate on a 1-D mesh (one replica group of every
// rank), or hsdp's [R, S(0)] on a 2 x 2 mesh of 4 ranks (ranks 0 and 2 keep one half, 1 and 3
// the other: two groups). Each group reads what it keeps once, each rank a contiguous part:
// the node reads the file's tensor bytes once in all (1.00x the distinct bytes).
TEST(LoadNodeReadsMpiTest, ReplicasReadTheFileOncePerNode) {
  const int n = WorldSize();
  for (const char* placements : {"[R]", "[R, S(0)]"}) {
    SCOPED_TRACE(placements);
    const bool hsdp = std::string(placements) != "[R]";
    const auto mesh = !hsdp ? Mesh({n}) : n == 4 ? Mesh({2, 2}) : Mesh({n, 1});
    std::vector<Spec> specs;
    int64_t total = 0;
    for (int i = 0; i < 40; ++i) {
      specs.push_back(
          DSpec(absl::StrCat("layer.", i), {3 + i % 5, 8}, DType::kFloat32, mesh, placements));
      total += specs.back().Full().nbytes();
    }
    const std::string file = WriteFile(specs);
    absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(file);
    ASSERT_TRUE(AllTrue(source.ok())) << source.status();
    Map loaded = Tree(specs, MetaLeaf);
    LoadStats stats;
    LoadOptions options;
    options.comm = g_world;
    options.stats = &stats;
    options.share_reads = true;
    options.bucket_bytes = 256;  // many buckets, and tensors larger than one
    ASSERT_TRUE(AllTrue(LoadStateDict(*source, loaded, options).ok()));
    Map own = Tree(specs, MetaLeaf);
    options.share_reads = false;
    options.stats = nullptr;  // `stats` keeps the shared load's figures
    ASSERT_TRUE(AllTrue(LoadStateDict(*source, own, options).ok()));
    ExpectTreeEq(Value(loaded), Value(own), "");
    EXPECT_EQ(Sum(stats.bytes_read), total);
    EXPECT_EQ(Sum(stats.bytes_read) + Sum(stats.bytes_from_node), Sum(stats.bytes_kept));
    if (!hsdp) {
      EXPECT_LE(stats.reads, 1);  // its part is one run of the file
    }
    ASSERT_TRUE(NoRankFailed());
  }
}

// An engine's own buffer: a Replicate local that is columns [1, 1 + 9) of a zero [6, 12]
// buffer (strided, borrowed) is read by one rank and moved into the others' buffers in
// place; the columns around it stay zero.
TEST(LoadNodeReadsMpiTest, StridedBuffersInPlace) {
  const Spec spec = DSpec("replicated.w", {6, 9}, DType::kFloat32, Mesh({WorldSize()}), "[R]");
  const std::string file = WriteFile({spec});
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(file);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  Tensor buffer = *Tensor::Zeros({6, 12}, DType::kFloat32);
  Tensor view = *buffer.Narrow(1, 1, 9);
  Map local;
  local.Set(spec.path, Value(*DTensor::Make(view, spec.mesh, spec.placements, spec.shape)));
  LoadStats stats;
  LoadOptions options;
  options.comm = g_world;
  options.stats = &stats;
  options.share_reads = true;
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, local, options).ok()));
  const DTensor& got = local.Find(spec.path)->as_dtensor();
  EXPECT_EQ(got.local().data_ptr(), view.data_ptr());
  ExpectSameTensor(got.local(), spec.Full(), spec.path);
  ExpectSameTensor(*buffer.Narrow(1, 0, 1), *Tensor::Zeros({6, 1}, DType::kFloat32), "left");
  ExpectSameTensor(*buffer.Narrow(1, 10, 2), *Tensor::Zeros({6, 2}, DType::kFloat32), "right");
  EXPECT_EQ(Sum(stats.bytes_read), 6 * 9 * 4);
  EXPECT_EQ(Sum(stats.bytes_from_node), (WorldSize() - 1) * 6 * 9 * 4);
}

TEST(LoadNodeReadsMpiTest, ABadNodeListIsTheSameErrorOnEveryRank) {
  if (WorldSize() == 1) GTEST_SKIP() << "one rank shares nothing";
  const std::vector<Spec> specs = Specs();
  const std::string file = WriteFile(specs);
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(file);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  Map loaded = Tree(specs, MetaLeaf);
  LoadOptions options;
  options.comm = g_world;
  options.share_reads = true;
  options.node_of_rank = {0};
  absl::StatusOr<LoadResult> l = LoadStateDict(*source, loaded, options);
  ExpectSameStatusOnEveryRank(l.status());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("node_of_rank has 1 entries"));
}

// A pipelined model: 5 layers on `WorldSize()` stages (uneven on 2, 3 and 4), tp 2 on 4
// ranks; the embedding, the final norm and the head at the ends.
std::vector<Spec> PipelinedModel() {
  std::vector<Spec> specs = {PlainSpec("model.embed_tokens.weight", {11, 6}, DType::kFloat32)};
  for (int layer = 0; layer < 5; ++layer) {
    const std::string at = absl::StrCat("model.layers.", layer, ".");
    specs.push_back(PlainSpec(at + "input_layernorm.weight", {6}, DType::kFloat32));
    specs.push_back(PlainSpec(at + "self_attn.q_proj.weight", {6, 6}, DType::kBFloat16));
    specs.push_back(PlainSpec(at + "mlp.down_proj.weight", {6, 9}, DType::kFloat32));
  }
  specs.push_back(PlainSpec("model.norm.weight", {6}, DType::kFloat32));
  specs.push_back(PlainSpec("lm_head.weight", {11, 6}, DType::kFloat32));
  return specs;
}

TEST(LoadNodeReadsMpiTest, APipelinedLayoutIsReadByEveryRankAloneNotShared) {
  const int n = WorldSize();
  const std::vector<Spec> specs = PipelinedModel();
  const std::string file = WriteFile(specs);
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(file);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Parse(
      n == 4 ? "megatron:tp=2,pp=2" : absl::StrCat("megatron:pp=", n).c_str(), n);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<SafetensorsTensorSpec> tensors;
  for (const Spec& s : specs) tensors.push_back({s.path, s.dtype, s.shape});
  absl::StatusOr<Map> local = layout->MetaStateDict(tensors, Rank());
  ASSERT_TRUE(local.ok()) << local.status();
  // A stage holds its own layers only: the ranks' lists differ.
  if (n > 1) {
    EXPECT_LT(local->size(), specs.size());
  }
  EXPECT_EQ(Sum(static_cast<int64_t>(local->size())), n == 4 ? 2 * specs.size() : specs.size());
  Map shared = *local;
  LoadOptions options;
  options.comm = g_world;
  options.read = ReadMode::kAll;
  absl::StatusOr<LoadResult> alone = LoadStateDict(*source, *local, options);
  ASSERT_TRUE(AllTrue(alone.ok())) << alone.status();
  for (const Spec& s : specs) {
    const Value* got = local->Find(s.path);
    if (got == nullptr) continue;
    ASSERT_EQ(got->kind(), ValueKind::kDTensor) << s.path;
    const DTensor& d = got->as_dtensor();
    absl::StatusOr<DTensor> want = DistributeTensor(s.Full(), d.mesh(), d.placements(), Rank());
    ASSERT_TRUE(want.ok()) << want.status();
    ExpectSameTensor(d.local(), want->local(), s.path);
  }
  // A layout of more ranks than the communicator's is refused on every rank, not loaded in
  // part.
  absl::StatusOr<DeviceMesh> wider = DeviceMesh::Create({2}, {Rank(), n});
  ASSERT_TRUE(wider.ok()) << wider.status();
  Map beyond;
  beyond.Set("lm_head.weight",
             MetaLeaf(DSpec("lm_head.weight", {11, 6}, DType::kFloat32,
                            std::make_shared<const DeviceMesh>(*wider), "[S(0)]")));
  const absl::Status outside = LoadStateDict(*source, beyond, options).status();
  ExpectSameStatusOnEveryRank(outside);
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.message(),
              HasSubstr(absl::StrCat("is on a mesh with rank ", n, ", beyond the communicator's ",
                                     n, " ranks")));
  if (n == 1) return;  // one rank shares nothing
  options.share_reads = true;
  absl::StatusOr<LoadResult> node = LoadStateDict(*source, shared, options);
  ExpectSameStatusOnEveryRank(node.status());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(node.status().message(),
              HasSubstr(absl::StrCat("is not on a mesh of the communicator's ", n, " ranks")));
}

}  // namespace
}  // namespace sdrt::test

class RemoveFolders : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& dir : sdrt::test::Made()) std::filesystem::remove_all(dir);
  }
};

int main(int argc, char** argv) {
  ::testing::AddGlobalTestEnvironment(new RemoveFolders);
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
