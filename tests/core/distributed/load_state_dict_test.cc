// LoadStateDict (core/distributed/load_state_dict.h) without a communicator, in one
// process: a Hugging Face folder read by this rank alone for its piece of a 2-rank mesh
// (read auto is all: one process reads what it sees), the reads and sources that need a
// communicator refused, an open error returned as it is, options out of range.
#include "sdrt/core/distributed/load_state_dict.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/comm/self_communicator.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/checkpoint/checkpoint_source_test_util.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

class LoadStateDictAloneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::FreshDir(absl::StrCat(
        "load_state_dict_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    tensors_ = {{"w", test::ValuePattern({5, 4}, DType::kFloat32, 1)},
                {"b", test::ValuePattern({3}, DType::kBFloat16, 2)}};
    test::WriteHfFolder(dir_ + "/hf", tensors_, 2);
    mesh_ = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2"));
  }

  // Rank 1's state dict: a meta Shard(0) DTensor "w" of the 2-rank mesh, a plain "b".
  Map Local() const {
    Map local;
    local.Set("w", Value(*DTensor::Make(*Tensor::Meta({2, 4}, DType::kFloat32), mesh_,
                                        {Placement::Shard(0)}, {5, 4})));
    local.Set("b", Value(*Tensor::Zeros({3}, DType::kBFloat16)));
    return local;
  }

  LoadOptions Alone(LoadStats* stats = nullptr) const {
    LoadOptions options;
    options.rank = 1;
    options.stats = stats;
    return options;
  }

  std::string dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::shared_ptr<const DeviceMesh> mesh_;
};

TEST_F(LoadStateDictAloneTest, ReadsItsOwnPiecesAndAutoIsAll) {
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok()) << source.status();
  for (const ReadMode read : {ReadMode::kAuto, ReadMode::kAll}) {
    SCOPED_TRACE(ReadModeName(read));
    Map local = Local();
    LoadStats stats;
    LoadOptions options = Alone(&stats);
    options.read = read;
    absl::StatusOr<LoadResult> r = LoadStateDict(*source, local, options);
    ASSERT_TRUE(r.ok()) << r.status();
    const DTensor want = *DistributeTensor(tensors_[0].second, mesh_, {Placement::Shard(0)}, 1);
    const Tensor& got = local.Find("w")->as_dtensor().local();
    ASSERT_EQ(got.shape(), want.local().shape());
    EXPECT_EQ(*TensorXxh64(got), *TensorXxh64(want.local()));
    EXPECT_EQ(*TensorXxh64(local.Find("b")->as_tensor()), *TensorXxh64(tensors_[1].second));
    EXPECT_EQ(stats.read, ReadMode::kAll);
    EXPECT_EQ(stats.read_reason, read == ReadMode::kAuto ? "auto: no communicator" : "requested");
    EXPECT_EQ(stats.bytes_kept, want.local().nbytes() + tensors_[1].second.nbytes());
    EXPECT_EQ(stats.bytes_read, stats.bytes_kept);
  }
}

TEST_F(LoadStateDictAloneTest, TheNewDTensorsShareOneBlockThatOneKeptTensorKeeps) {
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok()) << source.status();
  Map local = Local();
  local.Set("b", Value(*DTensor::Make(*Tensor::Meta({3}, DType::kBFloat16), mesh_,
                                      {Placement::Replicate()}, {3})));
  ASSERT_TRUE(LoadStateDict(*source, local, Alone()).ok());
  const DTensor* w = &local.Find("w")->as_dtensor();
  const DTensor* b = &local.Find("b")->as_dtensor();
  EXPECT_TRUE(b == w + 1 || w == b + 1);  // side by side: one allocation
  // Only "b" kept: its DTensor and bytes are where they were.
  const Value kept = *local.Find("b");
  local = Map();
  EXPECT_EQ(&kept.as_dtensor(), b);
  EXPECT_EQ(*TensorXxh64(kept.as_dtensor().local()), *TensorXxh64(tensors_[1].second));
}

TEST_F(LoadStateDictAloneTest, AStagingSizeNearInt64sMaxReads) {
  // The read plan compared element bits with 8 x the staging size, which overflowed from
  // 2^60 bytes on ("element bits 16 ... out of range").
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok()) << source.status();
  for (const int64_t staging : {int64_t{1} << 60, INT64_MAX}) {
    Map local = Local();
    LoadOptions options = Alone();
    options.staging_bytes = staging;
    absl::StatusOr<LoadResult> r = LoadStateDict(*source, local, options);
    ASSERT_TRUE(r.ok()) << staging << ": " << r.status();
    EXPECT_EQ(*TensorXxh64(local.Find("b")->as_tensor()), *TensorXxh64(tensors_[1].second));
  }
}

TEST_F(LoadStateDictAloneTest, ReadRootAndShardedFoldersNeedACommunicator) {
  Map local = Local();
  LoadOptions root = Alone();
  root.read = ReadMode::kRoot;
  const absl::Status no_root =
      LoadStateDict(CheckpointSource::Open(dir_ + "/hf"), local, root).status();
  EXPECT_EQ(no_root.code(), absl::StatusCode::kFailedPrecondition) << no_root;
  EXPECT_THAT(no_root.message(), HasSubstr("communicator"));
  const std::string sharded = dir_ + "/sharded";
  ASSERT_TRUE(WriteShardedCheckpoint(*CheckpointSource::Open(dir_ + "/hf"), mesh_,
                                     *ShardingPlan::Builtin("fsdp"), sharded)
                  .ok());
  const absl::Status no_reshard =
      LoadStateDict(CheckpointSource::Open(sharded), local, Alone()).status();
  EXPECT_EQ(no_reshard.code(), absl::StatusCode::kFailedPrecondition) << no_reshard;
  EXPECT_THAT(no_reshard.message(), HasSubstr("sharded folder needs a communicator"));
}

// A sharded folder whose metadata records an engine's layout (what `sdrt shard --map`
// writes: fused tensors hold each rank's parts) fills that layout alone.
TEST_F(LoadStateDictAloneTest, AnEngineLayoutFillsItsOwnLayoutAlone) {
  const std::string file = dir_ + "/engine.safetensors";
  ASSERT_TRUE(WriteSafetensors(file, tensors_,
                               {{kEngineLayoutMetadataKey, "--mesh 1 --plan fsdp"}})
                  .ok());
  auto one = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("1"));
  const std::string sharded = dir_ + "/sharded";
  ASSERT_TRUE(
      WriteShardedCheckpoint(*CheckpointSource::Open(file), one, *ShardingPlan::Builtin("fsdp"),
                             sharded)
          .ok());
  SelfCommunicator self;
  LoadOptions options;
  options.comm = &self;
  const auto w = [&](std::vector<Placement> placements) {
    Map local;
    local.Set("w", Value(*DTensor::Make(*Tensor::Zeros({5, 4}, DType::kFloat32), one,
                                        std::move(placements), {5, 4})));
    return local;
  };
  Map same = w({Placement::Shard(0)});
  ASSERT_TRUE(LoadStateDict(CheckpointSource::Open(sharded), same, options).ok());
  EXPECT_EQ(*TensorXxh64(same.Find("w")->as_dtensor().local()), *TensorXxh64(tensors_[0].second));
  Map other = w({Placement::Replicate()});
  const absl::Status refused = LoadStateDict(CheckpointSource::Open(sharded), other, options)
                                   .status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("holds an engine's layout for --mesh 1 --plan fsdp (__metadata__ "
                        "\"sdrt.engine_layout\": its fused tensors hold each rank's parts): "
                        "'w' is [S(0)] on mesh 1 there, asked for [R] on mesh 1"));
  Map plain;
  plain.Set("w", Value(*Tensor::Zeros({5, 4}, DType::kFloat32)));
  EXPECT_THAT(LoadStateDict(CheckpointSource::Open(sharded), plain, options).status().message(),
              HasSubstr("asked for a tensor that is not a DTensor"));
}

TEST_F(LoadStateDictAloneTest, AShardedFolderReplacedSinceItsOpenIsRefused) {
  // A 2-rank sharded folder opened, then another checkpoint of the same tensors in another
  // order written in its place: read by one rank (every rank file's pieces by the index's
  // positions), the old index would take one tensor for the other.
  auto one = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("1"));
  const auto shard = [&](const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::string& out) {
    const std::string file = dir_ + "/src.safetensors";
    ASSERT_TRUE(WriteSafetensors(file, tensors).ok());
    std::filesystem::remove_all(out);
    ASSERT_TRUE(WriteShardedCheckpoint(*CheckpointSource::Open(file), mesh_,
                                       *ShardingPlan::Builtin("fsdp"), out)
                    .ok());
  };
  const std::string sharded = dir_ + "/sharded";
  shard({{"u", tensors_[0].second}, {"v", test::ValuePattern({5, 4}, DType::kFloat32, 3)}},
        sharded);
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(sharded);
  ASSERT_TRUE(source.ok()) << source.status();
  shard({{"v", test::ValuePattern({5, 4}, DType::kFloat32, 3)}, {"u", tensors_[0].second}},
        sharded);
  SelfCommunicator self;
  LoadOptions options;
  options.comm = &self;
  Map local;
  for (const char* name : {"u", "v"}) {
    local.Set(name, Value(*DTensor::Make(*Tensor::Zeros({5, 4}, DType::kFloat32), one,
                                         {Placement::Shard(0)}, {5, 4})));
  }
  const absl::Status refused = LoadStateDict(*source, local, options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("index.json changed since the checkpoint was opened"));
  // Opened again, it loads.
  ASSERT_TRUE(LoadStateDict(CheckpointSource::Open(sharded), local, options).ok());
  EXPECT_EQ(*TensorXxh64(local.Find("u")->as_dtensor().local()), *TensorXxh64(tensors_[0].second));
}

TEST_F(LoadStateDictAloneTest, OpenErrorsAndOptions) {
  Map local = Local();
  const std::string missing = dir_ + "/missing.safetensors";
  const absl::Status open = LoadStateDict(CheckpointSource::Open(missing), local, Alone()).status();
  EXPECT_EQ(open.code(), absl::StatusCode::kNotFound) << open;
  EXPECT_THAT(open.message(), HasSubstr(missing));
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok());
  LoadOptions bucket = Alone();
  bucket.bucket_bytes = 63;
  LoadOptions direct = Alone();
  direct.read = ReadMode::kRoot;
  direct.direct_io = true;
  LoadOptions no_rank = Alone();
  no_rank.rank = -1;
  LoadOptions readers = Alone();
  readers.readers = 65;
  LoadOptions negative_readers = Alone();
  negative_readers.readers = -1;
  LoadOptions gap = Alone();
  gap.max_gap_bytes = -1;
  LoadOptions staging = Alone();
  staging.staging_bytes = 100;
  // Each option out of range is named alone (the message is not a list of every range).
  for (const auto& [options, part] : std::vector<std::pair<LoadOptions, std::string>>{
           {bucket, "bucket_bytes 63"},
           {direct, "direct_io"},
           {no_rank, "rank -1"},
           {readers, "readers 65 must be in [0, 64]"},
           {negative_readers, "readers -1 must be in [0, 64]"},
           {gap, "max_gap_bytes -1 must be >= 0"},
           {staging, "staging_bytes 100 must be >= 4096"}}) {
    const absl::Status s = LoadStateDict(*source, local, options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(part));
    EXPECT_EQ(s.message().find("staging_buffers"), absl::string_view::npos) << s;
  }
  EXPECT_TRUE(local.Find("w")->as_dtensor().local().is_meta());  // nothing was loaded
}

}  // namespace
}  // namespace sdrt
