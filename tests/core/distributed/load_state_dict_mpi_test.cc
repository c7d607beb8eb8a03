// Multi-rank tests of LoadStateDict (core/distributed/load_state_dict.h) over MPI: every
// rank reads its own bytes of a Hugging Face folder of 3 files, and the locals it gets are
// exactly BroadcastStateDict's (fsdp, tp-like Shard(1), 2-D meshes with [S(0), S(1)] and
// fsdp-tp's [_S(0, 2), S(0)], replicated, Partial, plain, 0-dim and ShardedTensor leaves,
// uneven and empty pieces). case-057: each rank reads only its pieces' bytes; the sum over
// ranks is at most 1.05x the checkpoint's tensor bytes for fsdp and tp plans. The same
// locals from every kind of source (a file, a Hugging Face folder, a folder of files, a
// sharded folder) with every read (all, root, auto), and auto's choice when one rank sees
// other files. CTest runs it under `mpiexec -n N`, N = 1..4; rank 0 writes the folder into
// a fresh temporary folder whose name it broadcasts (the ranks share one machine).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;

// The folders made by WriteHfFolder, removed by rank 0 when the tests end (RemoveFolders).
std::vector<std::string>& Made() {
  static auto* made = new std::vector<std::string>();
  return *made;
}

// A fresh folder made by rank 0, the same path on every rank.
std::string SharedTempDir() {
  std::string dir = test::SharedTempDir(*g_world, "sdrt_load_");
  Made().push_back(dir);
  return dir;
}

// Rank 0 writes `tensors` as a Hugging Face folder of 3 files (tensor i in file i % 3)
// under a fresh folder; every rank returns the folder's path once it is written.
std::string WriteHfFolder(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const std::string dir = SharedTempDir();
  if (Rank() == 0) {
    nlohmann::json map = nlohmann::json::object();
    int64_t total = 0;
    for (int f = 0; f < 3; ++f) {
      const std::string name = absl::StrCat("model-0000", f + 1, "-of-00003.safetensors");
      std::vector<std::pair<std::string, Tensor>> mine;
      for (size_t i = f; i < tensors.size(); i += 3) {
        mine.push_back(tensors[i]);
        map[tensors[i].first] = name;
        total += tensors[i].second.nbytes();
      }
      EXPECT_TRUE(WriteSafetensors(absl::StrCat(dir, "/", name), mine).ok());
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    FILE* out = std::fopen(absl::StrCat(dir, "/model.safetensors.index.json").c_str(), "w");
    EXPECT_NE(out, nullptr);
    if (out != nullptr) {
      const std::string text = index.dump();
      std::fwrite(text.data(), 1, text.size(), out);
      std::fclose(out);
    }
  }
  EXPECT_TRUE(g_world->Barrier().ok());
  return dir;
}

std::vector<Spec> MixedSpecs() {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const auto m2 = n == 4 ? Mesh({2, 2}) : Mesh({1, n});
  return {
      DSpec("fsdp.a", {7, 5}, DType::kFloat32, m1, "[S(0)]"),
      DSpec("fsdp.b", {13}, DType::kBFloat16, m1, "[S(0)]"),
      DSpec("fsdp.empty_pieces", {2, 8}, DType::kInt64, m1, "[S(0)]"),
      DSpec("tp.col", {6, 9}, DType::kFloat32, m1, "[S(1)]"),
      DSpec("tp.mid", {4, 3, 5}, DType::kFloat16, m1, "[S(1)]"),
      DSpec("mesh2.fsdp_tp_row", {8, 6}, DType::kFloat32, m2, "[S(0), S(1)]"),
      DSpec("mesh2.fsdp_tp_col", {12, 3}, DType::kFloat32, m2, "[_S(0, 2), S(0)]"),
      DSpec("mesh2.hsdp", {9, 4}, DType::kInt32, m2, "[R, S(0)]"),
      DSpec("strided", {5}, DType::kUInt8, m1, "[_S(0, 2)]"),
      DSpec("replicated", {9}, DType::kFloat64, m1, "[R]"),
      DSpec("partial", {3, 4}, DType::kFloat32, m1, "[P(sum)]"),
      DSpec("dtensor_0dim", {}, DType::kFloat32, m1, "[R]"),
      PlainSpec("plain", {3, 3}, DType::kFloat32),
      PlainSpec("plain_0dim", {}, DType::kInt64),
      SSpec("sharded", {10, 4}, DType::kFloat32, ChunkShards(IntVector{10, 4}, 0)),
  };
}

std::vector<std::pair<std::string, Tensor>> Fulls(const std::vector<Spec>& specs) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Spec& s : specs) out.emplace_back(s.path, s.Full());
  return out;
}

Map Tree(const std::vector<Spec>& specs, const LeafFn& leaf) {
  Map m;
  for (const Spec& s : specs) m.Set(s.path, leaf(s));
  return m;
}

LoadOptions WorldLoad(LoadStats* stats = nullptr) {
  LoadOptions o;
  o.comm = g_world;
  o.stats = stats;
  return o;
}

// The bytes of the tensors `local` holds on this rank (locals, local shards, tensors).
int64_t LocalBytes(const Map& local) {
  int64_t bytes = 0;
  for (size_t i = 0; i < local.size(); ++i) {
    const Value& v = local.value(i);
    if (v.kind() == ValueKind::kDTensor) bytes += v.as_dtensor().local().nbytes();
    if (v.kind() == ValueKind::kTensor) bytes += v.as_tensor().nbytes();
    if (v.kind() == ValueKind::kShardedTensor) {
      for (const LocalShard& shard : v.as_sharded().local_shards()) bytes += shard.tensor.nbytes();
    }
  }
  return bytes;
}

// Rank 0's full state dict of `specs` (BroadcastStateDict's source); empty elsewhere.
Map FullOnRankZero(const std::vector<Spec>& specs) {
  Map full;
  if (Rank() == 0) {
    for (const Spec& s : specs) full.Set(s.path, Value(s.Full()));
  }
  return full;
}

// `tensors` as every kind of source, written by rank 0: a safetensors file, a Hugging Face
// folder of 3 files, a folder of 2 files without an index, and an sdrt sharded folder
// written by 2 ranks with fsdp (another layout than the locals', and more or fewer rank
// files than ranks).
std::vector<std::pair<CheckpointKind, std::string>> WriteEveryKind(
    const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const std::string hf = WriteHfFolder(tensors);
  const std::string dir = SharedTempDir();
  const std::string file = dir + "/model.safetensors";
  const std::string folder = dir + "/folder";
  const std::string sharded = dir + "/sharded";
  if (Rank() == 0) {
    EXPECT_TRUE(WriteSafetensors(file, tensors).ok());
    EXPECT_EQ(mkdir(folder.c_str(), 0755), 0);
    for (size_t part = 0; part < 2; ++part) {
      std::vector<std::pair<std::string, Tensor>> mine;
      for (size_t i = part; i < tensors.size(); i += 2) mine.push_back(tensors[i]);
      EXPECT_TRUE(WriteSafetensors(absl::StrCat(folder, "/part", part, ".safetensors"), mine).ok());
    }
    absl::StatusOr<ShardedCheckpointIndex> index = WriteShardedCheckpoint(
        *CheckpointSource::Open(file), Mesh({2}), *ShardingPlan::Builtin("fsdp"), sharded);
    EXPECT_TRUE(index.ok()) << index.status();
  }
  EXPECT_TRUE(g_world->Barrier().ok());
  return {{CheckpointKind::kSafetensorsFile, file},
          {CheckpointKind::kHfFolder, hf},
          {CheckpointKind::kSafetensorsFolder, folder},
          {CheckpointKind::kShardedFolder, sharded}};
}

TEST(LoadStateDictMpiTest, SameLocalsAsBroadcastStateDict) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::string dir = WriteHfFolder(Fulls(specs));
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  Map full;
  if (Rank() == 0) {
    for (const CheckpointSourceTensor& t : source->tensors())
      full.Set(t.name, *source->Get(t.name));
  }
  for (const LeafFn& leaf : {LeafFn(MetaLeaf), LeafFn(ZeroLeaf)}) {
    Map broadcast = Tree(specs, leaf);
    absl::StatusOr<BroadcastResult> b = BroadcastStateDict(full, broadcast, WorldBroadcast());
    ASSERT_TRUE(AllTrue(b.ok())) << b.status();
    // Small staging buffers: many reads, runs cut, the reader threads busy (one, or three
    // reading at once while the batches are consumed in order); and contiguous pieces
    // mapped instead of read (map_results), the rest read.
    struct Variant {
      int64_t staging;
      int readers;
      bool map;
    };
    for (const Variant& v : std::vector<Variant>{{4096, 1, false},
                                                 {4096, 3, false},
                                                 {int64_t{256} << 20, 1, false},
                                                 {int64_t{256} << 20, 3, false},
                                                 {4096, 1, true}}) {
      const auto [staging, readers, map] = v;
      SCOPED_TRACE(absl::StrCat(staging, " bytes, ", readers, " readers, map ", map));
      Map loaded = Tree(specs, leaf);
      LoadStats stats;
      LoadOptions options = WorldLoad(&stats);
      options.staging_bytes = staging;
      options.readers = readers;
      options.map_results = map;
      int64_t last_done = -1;
      int64_t calls = 0;
      options.progress = [&](int64_t done, int64_t total) {
        EXPECT_GT(done, last_done);
        EXPECT_LE(done, total);
        last_done = done;
        ++calls;
      };
      absl::StatusOr<LoadResult> l = LoadStateDict(*source, loaded, options);
      ASSERT_TRUE(AllTrue(l.ok())) << l.status();
      EXPECT_TRUE(l->missing_keys.empty());
      EXPECT_TRUE(l->unexpected_keys.empty());
      ExpectTreeEq(Value(loaded), Value(broadcast), "");
      EXPECT_LE(stats.bytes_read, stats.bytes_kept + stats.bytes_kept / 32);
      // Mapped: the fresh pieces of one range (fsdp.a's rows, a meta local; the 0-dim
      // tensors, which replace their leaves), never a preallocated local (ZeroLeaf's).
      const Tensor& fsdp_a = loaded.Find("fsdp.a")->as_dtensor().local();
      const bool fresh = leaf(specs[0]).as_dtensor().local().is_meta();
      EXPECT_EQ(fsdp_a.storage()->kind() == StorageKind::kMappedFile, map && fresh);
      if (map) {
        EXPECT_GE(stats.bytes_mapped, (fresh ? fsdp_a.nbytes() : 0) + 8 + 4);
      } else {
        EXPECT_EQ(stats.bytes_mapped, 0);
      }
      EXPECT_LE(stats.bytes_mapped, stats.bytes_kept);
      EXPECT_LE(stats.peak_staging_bytes, (readers > 1 ? readers + 1 : 2) * (staging + 16));
      EXPECT_GE(stats.preads, stats.reads);
      EXPECT_EQ(calls, stats.reads);
      if (stats.reads > 0) {
        EXPECT_EQ(last_done, stats.bytes_read);
      }
      ASSERT_TRUE(NoRankFailed());
    }
  }
  // Without a communicator: this rank alone, the same locals.
  Map broadcast = Tree(specs, MetaLeaf);
  ASSERT_TRUE(AllTrue(BroadcastStateDict(full, broadcast, WorldBroadcast()).ok()));
  Map alone = Tree(specs, MetaLeaf);
  LoadOptions options;
  options.rank = Rank();
  options.staging_buffers = 1;
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, alone, options).ok()));
  ExpectTreeEq(Value(alone), Value(broadcast), "");
}

// --direct-io: the same locals through O_DIRECT (the test folder is on a file system that
// supports it, as ext4 and xfs do; tmpfs does not, and then the error is checked instead).
TEST(LoadStateDictMpiTest, DirectIoGivesTheSameLocals) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::string dir = WriteHfFolder(Fulls(specs));
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  Map page_cache = Tree(specs, MetaLeaf);
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, page_cache, WorldLoad()).ok()));
  for (int64_t staging : {int64_t{4096}, int64_t{1} << 20}) {
    SCOPED_TRACE(staging);
    Map direct = Tree(specs, MetaLeaf);
    LoadStats stats;
    LoadOptions options = WorldLoad(&stats);
    options.staging_bytes = staging;
    options.direct_io = true;
    absl::StatusOr<LoadResult> r = LoadStateDict(*source, direct, options);
    if (!r.ok() && r.status().code() == absl::StatusCode::kInvalidArgument) {
      EXPECT_THAT(r.status().message(), HasSubstr("does not support O_DIRECT"));
      GTEST_SKIP() << r.status();
    }
    ASSERT_TRUE(AllTrue(r.ok())) << r.status();
    ExpectTreeEq(Value(direct), Value(page_cache), "");
    // Each read widened to whole 4096-byte blocks: at most two more blocks per read.
    EXPECT_GE(stats.bytes_read, stats.bytes_kept);
    EXPECT_LE(stats.bytes_read, stats.bytes_kept + stats.bytes_kept / 32 + stats.reads * 8192);
    EXPECT_LE(stats.peak_staging_bytes, 2 * (staging + 3 * 4096));
    ASSERT_TRUE(NoRankFailed());
  }
}

// Reads of 1 MiB and more whose one segment is a contiguous range of its local are pread
// straight into the local (staged_reader.h's DirectTarget): the same locals, and only the
// small reads go through staging.
TEST(LoadStateDictMpiTest, LargePiecesAreReadStraightIntoTheirLocals) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const std::vector<Spec> specs = {
      DSpec("big.fsdp", {1024 * n + 3, 320}, DType::kFloat32, m1, "[S(0)]"),
      DSpec("big.replicated", {700, 512}, DType::kFloat32, m1, "[R]"),
      DSpec("big.col", {2048, 256 * n}, DType::kFloat32, m1, "[S(1)]"),
  };  // one tensor per file (WriteHfFolder), so no read joins two of them
  const std::string dir = WriteHfFolder(Fulls(specs));
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  Map full;
  if (Rank() == 0) {
    for (const CheckpointSourceTensor& t : source->tensors())
      full.Set(t.name, *source->Get(t.name));
  }
  for (const LeafFn& leaf : {LeafFn(MetaLeaf), LeafFn(ZeroLeaf)}) {
    for (int buffers : {1, 2}) {
      SCOPED_TRACE(buffers);
      Map broadcast = Tree(specs, leaf);
      ASSERT_TRUE(AllTrue(BroadcastStateDict(full, broadcast, WorldBroadcast()).ok()));
      Map loaded = Tree(specs, leaf);
      LoadStats stats;
      LoadOptions options = WorldLoad(&stats);
      options.staging_buffers = buffers;
      ASSERT_TRUE(AllTrue(LoadStateDict(*source, loaded, options).ok()));
      ExpectTreeEq(Value(loaded), Value(broadcast), "");
      // Staged: only big.col's 1 KiB rows (on 2 ranks and more), in at most two 1 MiB
      // batches; a staged 1.3 MiB piece would need more.
      EXPECT_LE(stats.peak_staging_bytes, 2 * ((int64_t{1} << 20) + 16));
      ASSERT_TRUE(NoRankFailed());
    }
  }
}

// New locals come from one arena laid out in file order, so whole tensors that follow one
// another in a file are read straight into them: one pread per file, no staging buffer.
TEST(LoadStateDictMpiTest, WholeTensorsThatFollowInTheFileAreReadWithoutStaging) {
  const auto m1 = Mesh({WorldSize()});
  std::vector<Spec> specs;
  for (int i = 0; i < 30; ++i) {
    const IntVector shape = {1 + i % 4, 3 + i % 5};
    specs.push_back(i % 2 == 0 ? DSpec(absl::StrCat("r", i), shape, DType::kFloat32, m1, "[R]")
                               : PlainSpec(absl::StrCat("p", i), shape, DType::kFloat32));
  }
  const std::string dir = WriteHfFolder(Fulls(specs));  // 10 tensors in each of 3 files
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok())) << source.status();
  Map full;
  if (Rank() == 0) {
    for (const CheckpointSourceTensor& t : source->tensors()) full.Set(t.name, *source->Get(t.name));
  }
  // Meta DTensors and plain tensors (which the load replaces): every local is new.
  const auto leaf = [](const Spec& s) {
    return s.kind == Spec::Kind::kPlain ? Value(*Tensor::Zeros(s.shape, s.dtype)) : MetaLeaf(s);
  };
  Map broadcast = Tree(specs, leaf);
  ASSERT_TRUE(AllTrue(BroadcastStateDict(full, broadcast, WorldBroadcast()).ok()));
  Map loaded = Tree(specs, leaf);
  LoadStats stats;
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, loaded, WorldLoad(&stats)).ok()));
  ExpectTreeEq(Value(loaded), Value(broadcast), "");
  EXPECT_EQ(stats.reads, 3);
  EXPECT_EQ(stats.preads, 3);
  EXPECT_EQ(stats.peak_staging_bytes, 0);
  EXPECT_EQ(stats.bytes_read, stats.bytes_kept);
  // Every new local lives in the one arena.
  const Value& first = loaded.value(0);
  ASSERT_EQ(first.kind(), ValueKind::kDTensor);
  for (size_t i = 0; i < loaded.size(); ++i) {
    const Value& v = loaded.value(i);
    const Tensor& t = v.kind() == ValueKind::kDTensor ? v.as_dtensor().local() : v.as_tensor();
    EXPECT_EQ(t.storage().get(), first.as_dtensor().local().storage().get()) << loaded.key(i);
  }
  ASSERT_TRUE(NoRankFailed());
}

TEST(LoadStateDictMpiTest, WritesStridedLocalsInPlace) {
  const int n = WorldSize();
  const Spec spec = DSpec("tp.col", {6, 9}, DType::kFloat32, Mesh({n}), "[S(1)]");
  const std::string dir = WriteHfFolder({{spec.path, spec.Full()}});
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok()));
  // The local is columns [1, 1 + c) of a zero [6, c + 3] buffer: strided, borrowed.
  const IntVector local_shape = spec.LocalShape();
  Tensor buffer = *Tensor::Zeros({6, local_shape[1] + 3}, DType::kFloat32);
  Tensor view = *buffer.Narrow(1, 1, local_shape[1]);
  Map local;
  local.Set(spec.path, Value(*DTensor::Make(view, spec.mesh, spec.placements, spec.shape)));
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, local, WorldLoad()).ok()));
  const DTensor& got = local.Find(spec.path)->as_dtensor();
  EXPECT_EQ(got.local().data_ptr(), view.data_ptr());
  const DTensor want = *DistributeTensor(spec.Full(), spec.mesh, spec.placements, Rank());
  ExpectSameTensor(got.local(), want.local(), spec.path);
  // The columns around it are untouched.
  ExpectSameTensor(*buffer.Narrow(1, 0, 1), *Tensor::Zeros({6, 1}, DType::kFloat32), "left");
}

TEST(LoadStateDictMpiTest, MissingUnexpectedStrictAndMismatchesNameTheKey) {
  const int n = WorldSize();
  const Spec a = DSpec("a", {4, 2}, DType::kFloat32, Mesh({n}), "[S(0)]");
  const Spec b = DSpec("b", {3}, DType::kFloat32, Mesh({n}), "[S(0)]");
  const std::string dir = WriteHfFolder({{a.path, a.Full()}, {b.path, b.Full()}});
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok()));
  Map local = Tree({a}, MetaLeaf);
  local.Set("extra", Value(int64_t{7}));
  LoadOptions options = WorldLoad();
  options.strict = true;
  absl::StatusOr<LoadResult> r = LoadStateDict(*source, local, options);
  ASSERT_TRUE(AllTrue(r.ok()));
  EXPECT_EQ(r->missing_keys, std::vector<std::string>{"extra"});
  EXPECT_EQ(r->unexpected_keys, std::vector<std::string>{"b"});
  EXPECT_EQ(local.Find("extra"), nullptr);
  // Rank 0 alone expects another dtype: every rank gets its InvalidArgument naming "a".
  const Spec wrong =
      DSpec("a", {4, 2}, Rank() == 0 ? DType::kInt32 : DType::kFloat32, Mesh({n}), "[S(0)]");
  Map bad = Tree({wrong}, MetaLeaf);
  absl::StatusOr<LoadResult> e = LoadStateDict(*source, bad, WorldLoad());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("'a'"));
  ExpectSameStatusOnEveryRank(e.status());
  // A leaf of another float dtype is a cast with kAll; the root sends the checkpoint's
  // dtypes, so kRoot refuses it before sending, the same error on every rank.
  const Spec half = DSpec("a", {4, 2}, DType::kBFloat16, Mesh({n}), "[S(0)]");
  Map cast = Tree({half}, MetaLeaf);
  LoadOptions root = WorldLoad();
  root.read = ReadMode::kRoot;
  absl::StatusOr<LoadResult> c = LoadStateDict(*source, cast, root);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("'a' is bfloat16 here but float32 in the checkpoint: read kRoot"));
  ExpectSameStatusOnEveryRank(c.status());
  Map cast_all = Tree({half}, MetaLeaf);
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, cast_all, WorldLoad()).ok()));
}

// Three Shard(0) tensors of one shape over the world, one per file of a Hugging Face folder
// (tensor i in file i): the files a test changes under an open source.
struct ThreeFiles {
  ThreeFiles()
      : a(DSpec("a", {64, 4}, DType::kFloat32, Mesh({WorldSize()}), "[S(0)]")),
        b(DSpec("b", {64, 4}, DType::kFloat32, Mesh({WorldSize()}), "[S(0)]")),
        c(DSpec("c", {64, 4}, DType::kFloat32, Mesh({WorldSize()}), "[S(0)]")),
        dir(WriteHfFolder({{a.path, a.Full()}, {b.path, b.Full()}, {c.path, c.Full()}})) {}
  const Spec a, b, c;
  const std::string dir;
};

TEST(LoadStateDictMpiTest, AFileThatChangedSizeIsTheSameErrorOnEveryRank) {
  const ThreeFiles files;
  const Spec& a = files.a;
  const Spec& b = files.b;
  const Spec& c = files.c;
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(files.dir);
  ASSERT_TRUE(AllTrue(source.ok()));
  const std::string victim = source->files()[1].path;
  if (Rank() == 0) {
    EXPECT_EQ(truncate(victim.c_str(), source->files()[1].size - 100), 0);
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  // Read by every rank, and by rank 0 alone, from its mapping (which faulted, SIGBUS, where
  // the broadcast read past the file's new end).
  for (const ReadMode read : {ReadMode::kAll, ReadMode::kRoot}) {
    Map local = Tree({a, b, c}, MetaLeaf);
    LoadOptions options = WorldLoad();
    options.read = read;
    absl::StatusOr<LoadResult> r = LoadStateDict(*source, local, options);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat(victim, ": size changed")));
    ExpectSameStatusOnEveryRank(r.status());
  }
}

TEST(LoadStateDictMpiTest, AFileRenamedOverIsRefusedReadByEveryRankAndReadFromTheRootsMap) {
  const ThreeFiles files;
  const Spec& a = files.a;
  const Spec& b = files.b;
  const Spec& c = files.c;
  // The same header and sizes, "b" holding c's values.
  const std::string other =
      WriteHfFolder({{a.path, a.Full()}, {b.path, c.Full()}, {c.path, c.Full()}});
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(files.dir);
  ASSERT_TRUE(AllTrue(source.ok()));
  const std::string victim = source->files()[1].path;
  if (Rank() == 0) {
    const std::string name = source->files()[1].name;
    EXPECT_EQ(rename((other + "/" + name).c_str(), victim.c_str()), 0);
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  // Every rank reading opens the path again: another file there is refused on every rank.
  Map all = Tree({a, b, c}, MetaLeaf);
  absl::StatusOr<LoadResult> r = LoadStateDict(*source, all, WorldLoad());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(),
              HasSubstr(absl::StrCat(victim, ": replaced since it was opened")));
  ExpectSameStatusOnEveryRank(r.status());
  // The root reads its own mapping, which holds the file it opened: the old bytes.
  Map root = Tree({a, b, c}, MetaLeaf);
  LoadOptions options = WorldLoad();
  options.read = ReadMode::kRoot;
  ASSERT_TRUE(AllTrue(LoadStateDict(*source, root, options).ok()));
  ExpectTreeEq(Value(root), Value(Tree({a, b, c}, ExpectedFromMetaLeaf)), "");
}

// case-057: a Hugging Face folder of 3 files loaded into the ranks with the fsdp and the tp
// plans: each rank reads only its pieces' bytes, and the bytes read over all ranks are at
// most 1.05x the checkpoint's tensor bytes (no tensor here is replicated under either plan).
TEST(LoadStateDictMpiTest, Case057EveryRankReadsOnlyItsOwnBytes) {
  const int n = WorldSize();
  auto mesh = Mesh({n});
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    for (const char* name : {"self_attn.q_proj.weight", "self_attn.o_proj.weight",
                             "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      const std::string full_name = p + name;
      tensors.emplace_back(full_name, ValuePattern({64, 96}, DType::kBFloat16, SaltOf(full_name)));
    }
  }
  tensors.emplace_back("model.embed_tokens.weight", ValuePattern({101, 32}, DType::kFloat32, 5));
  const std::string dir = WriteHfFolder(tensors);
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(AllTrue(source.ok()));
  for (const char* plan_name : {"fsdp", "tp"}) {
    SCOPED_TRACE(plan_name);
    const ShardingPlan plan = *ShardingPlan::FromSpec(plan_name);
    Map local;
    int64_t mine = 0;
    for (const auto& [name, full] : tensors) {
      const std::vector<Placement> placements = *plan.PlacementsFor(name, full.shape(), *mesh);
      const DTensor piece = *DistributeTensor(full, mesh, placements, Rank());
      mine += piece.local().nbytes();
      local.Set(name, Value(*DTensor::Make(*Tensor::Meta(piece.local().shape(), full.dtype()), mesh,
                                           placements, full.shape())));
    }
    LoadStats stats;
    ASSERT_TRUE(AllTrue(LoadStateDict(*source, local, WorldLoad(&stats)).ok()));
    EXPECT_EQ(stats.bytes_kept, mine);
    EXPECT_LE(stats.bytes_read, stats.bytes_kept + stats.bytes_kept / 32);
    if (std::string(plan_name) == "fsdp") {
      EXPECT_EQ(stats.bytes_read, stats.bytes_kept);
    }
    absl::StatusOr<std::vector<std::string>> all =
        g_world->AllGatherBytes(absl::StrCat(stats.bytes_read));
    ASSERT_TRUE(all.ok());
    int64_t sum = 0;
    for (const std::string& s : *all) sum += std::stoll(s);
    EXPECT_LE(static_cast<double>(sum), 1.05 * static_cast<double>(source->total_bytes()));
    EXPECT_GE(sum, source->total_bytes());
    for (const auto& [name, full] : tensors) {
      const DTensor& got = local.Find(name)->as_dtensor();
      ExpectSameTensor(got.local(), DistributeTensor(full, mesh, got.placements(), Rank())->local(),
                       name);
    }
    ASSERT_TRUE(NoRankFailed());
  }
}

// One verb for every source and read: a file, a Hugging Face folder, a folder of files and
// a sharded folder, each read by every rank, by the root, and as auto picks (every rank,
// here: one machine), give BroadcastStateDict's locals, meta and preallocated alike; the
// stats say which read ran and why. A sharded folder is resharded from its rank files
// whatever the read but kRoot, which is the same InvalidArgument on every rank.
TEST(LoadStateDictMpiTest, EveryKindOfSourceWithEveryRead) {
  const std::vector<Spec> specs = MixedSpecs();
  const auto kinds = WriteEveryKind(Fulls(specs));
  const Map full = FullOnRankZero(specs);
  for (const LeafFn& leaf : {LeafFn(MetaLeaf), LeafFn(ZeroLeaf)}) {
    Map broadcast = Tree(specs, leaf);
    ASSERT_TRUE(AllTrue(BroadcastStateDict(full, broadcast, WorldBroadcast()).ok()));
    for (const auto& [kind, path] : kinds) {
      for (const ReadMode read : {ReadMode::kAll, ReadMode::kRoot, ReadMode::kAuto}) {
        SCOPED_TRACE(absl::StrCat(CheckpointKindName(kind), ", read ", ReadModeName(read)));
        const bool sharded = kind == CheckpointKind::kShardedFolder;
        Map loaded = Tree(specs, leaf);
        LoadStats stats;
        LoadOptions options = WorldLoad(&stats);
        options.read = read;
        options.bucket_bytes = 256;  // several broadcast buckets, several reshard rounds
        absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path);
        ASSERT_TRUE(AllTrue(source.ok())) << source.status();
        absl::StatusOr<LoadResult> r = LoadStateDict(*source, loaded, options);
        if (sharded && read == ReadMode::kRoot) {
          EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_THAT(r.status().message(), HasSubstr("sharded folder"));
          ExpectSameStatusOnEveryRank(r.status());
          continue;
        }
        ASSERT_TRUE(AllTrue(r.ok())) << r.status();
        EXPECT_TRUE(r->missing_keys.empty());
        EXPECT_TRUE(r->unexpected_keys.empty());
        ExpectTreeEq(Value(loaded), Value(broadcast), "");
        EXPECT_EQ(stats.read, read == ReadMode::kRoot ? ReadMode::kRoot : ReadMode::kAll);
        EXPECT_EQ(stats.read_reason, sharded ? "an sdrt sharded folder: rank files, resharded"
                                     : read == ReadMode::kAuto
                                         ? "auto: every rank sees the same files"
                                         : "requested");
        EXPECT_EQ(stats.bytes_kept, LocalBytes(loaded));
        if (sharded) {
          int64_t files = 0;  // rank file f is read by rank f mod n
          for (int f = Rank(); f < 2; f += WorldSize()) ++files;
          EXPECT_EQ(stats.reads, files);
          EXPECT_EQ(stats.transfer.wire_bytes, stats.transfer.optimum_bytes);
        } else if (read == ReadMode::kRoot) {
          EXPECT_EQ(stats.bytes_read, Rank() == 0 ? source->total_bytes() : 0);
          // One rank holds everything already: nothing moves.
          EXPECT_GT(stats.transfer.exchanges, WorldSize() > 1 ? 1 : -1);
        } else {
          EXPECT_LE(stats.bytes_read, stats.bytes_kept + stats.bytes_kept / 32);
        }
        ASSERT_TRUE(NoRankFailed());
      }
    }
  }
}

// kAuto reads with every rank when every rank sees the same files, else from the root: a
// rank whose file has another modification time, or that cannot open its source, is named
// in the reason. With kRoot only the root's source is read; with kAll a rank's open error
// is every rank's; ranks that ask for different reads fail alike.
TEST(LoadStateDictMpiTest, AutoReadsFromTheRootWhenARankSeesOtherFiles) {
  const int n = WorldSize();
  const std::vector<Spec> specs = {DSpec("a", {8, 3}, DType::kFloat32, Mesh({n}), "[S(0)]"),
                                   DSpec("b", {5}, DType::kBFloat16, Mesh({n}), "[R]")};
  // Every rank's own copy of one file, all with the same modification time.
  const std::string dir = SharedTempDir();
  const std::string mine = absl::StrCat(dir, "/copy", Rank(), ".safetensors");
  const timespec when[2] = {{1700000000, 0}, {1700000000, 123456789}};
  if (Rank() == 0) {
    for (int q = 0; q < n; ++q) {
      const std::string copy = absl::StrCat(dir, "/copy", q, ".safetensors");
      EXPECT_TRUE(WriteSafetensors(copy, Fulls(specs)).ok());
      EXPECT_EQ(utimensat(AT_FDCWD, copy.c_str(), when, 0), 0);
    }
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  Map want = Tree(specs, MetaLeaf);
  ASSERT_TRUE(AllTrue(BroadcastStateDict(FullOnRankZero(specs), want, WorldBroadcast()).ok()));
  LoadStats stats;
  const auto load = [&](const std::string& path, ReadMode read) {
    Map local = Tree(specs, MetaLeaf);
    LoadOptions options = WorldLoad(&stats);
    options.read = read;
    absl::StatusOr<LoadResult> r = LoadStateDict(CheckpointSource::Open(path), local, options);
    if (r.ok()) ExpectTreeEq(Value(local), Value(want), "");
    return r.status();
  };
  ASSERT_TRUE(AllTrue(load(mine, ReadMode::kAuto).ok()));
  EXPECT_EQ(stats.read, ReadMode::kAll);
  EXPECT_EQ(stats.read_reason, "auto: every rank sees the same files");
  if (n == 1) return;

  const int last = n - 1;
  if (Rank() == last) {
    const timespec later[2] = {{1700000001, 0}, {1700000001, 0}};
    EXPECT_EQ(utimensat(AT_FDCWD, mine.c_str(), later, 0), 0);
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  ASSERT_TRUE(AllTrue(load(mine, ReadMode::kAuto).ok()));
  EXPECT_EQ(stats.read, ReadMode::kRoot);
  EXPECT_EQ(stats.read_reason, absl::StrCat("auto: rank ", last, " sees other files than rank 0"));
  EXPECT_EQ(stats.bytes_read, Rank() == 0 ? CheckpointSource::Open(mine)->total_bytes() : 0);
  // Each rank's own tensor (on a mesh of its rank alone) loads with every rank reading;
  // the root that auto picks refuses it, saying why auto picked it.
  const Spec own = DSpec("a", {8, 3}, DType::kFloat32,
                         std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}, {Rank()})),
                         "[R]");
  for (const ReadMode read : {ReadMode::kAll, ReadMode::kAuto}) {
    Map local = Tree({own}, MetaLeaf);
    LoadOptions options = WorldLoad();
    options.read = read;
    const absl::Status s = LoadStateDict(CheckpointSource::Open(mine), local, options).status();
    ExpectSameStatusOnEveryRank(s);
    if (read == ReadMode::kAll) {
      ASSERT_TRUE(s.ok()) << s;
      ExpectSameTensor(local.Find("a")->as_dtensor().local(), own.Full(), "a");
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("(read kRoot, auto: rank ", last,
                                                      " sees other files than rank 0)")));
    }
  }

  // The last rank cannot open its source.
  const std::string missing = dir + "/missing.safetensors";
  const std::string seen = Rank() == last ? missing : mine;
  ASSERT_TRUE(AllTrue(load(seen, ReadMode::kAuto).ok()));
  EXPECT_EQ(stats.read, ReadMode::kRoot);
  EXPECT_THAT(stats.read_reason,
              testing::StartsWith(absl::StrCat("auto: rank ", last, " cannot open it (")));
  EXPECT_THAT(stats.read_reason, HasSubstr(missing));
  ASSERT_TRUE(AllTrue(load(seen, ReadMode::kRoot).ok()));
  EXPECT_EQ(stats.read_reason, "requested");
  const absl::Status all = load(seen, ReadMode::kAll);
  EXPECT_EQ(all.code(), absl::StatusCode::kNotFound) << all;
  EXPECT_THAT(all.message(), HasSubstr(missing));
  ExpectSameStatusOnEveryRank(all);
  // Rank 0 cannot open its source: auto picks the root, whose error is every rank's.
  const absl::Status root = load(Rank() == 0 ? missing : mine, ReadMode::kAuto);
  EXPECT_EQ(root.code(), absl::StatusCode::kNotFound) << root;
  ExpectSameStatusOnEveryRank(root);

  const absl::Status mixed = load(mine, Rank() == 0 ? ReadMode::kAll : ReadMode::kAuto);
  EXPECT_EQ(mixed.code(), absl::StatusCode::kInvalidArgument) << mixed;
  EXPECT_THAT(mixed.message(), HasSubstr("disagree on the options"));
  ExpectSameStatusOnEveryRank(mixed);
  ASSERT_TRUE(NoRankFailed());
}

}  // namespace
}  // namespace sdrt::test

// Each test ends with a collective (the ranks' last LoadStateDict agreement or
// NoRankFailed), so the TearDown barrier below runs after every rank is done reading.
class RemoveFolders : public ::testing::Environment {
 public:
  void TearDown() override {
    if (sdrt::test::g_world == nullptr || !sdrt::test::g_world->Barrier().ok()) return;
    if (sdrt::test::Rank() != 0) return;
    for (const std::string& dir : sdrt::test::Made()) std::filesystem::remove_all(dir);
  }
};

int main(int argc, char** argv) {
  ::testing::AddGlobalTestEnvironment(new RemoveFolders);
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
