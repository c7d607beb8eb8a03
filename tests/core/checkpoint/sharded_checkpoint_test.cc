// Sharded checkpoints: write with every built-in plan on 1-D, 2-D, 3-D, even and uneven
// meshes, reassemble from the rank files alone, byte-identical; the index's hashes; rank
// loading as DTensors; atomic replacement; every validation error.
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/minilm.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::shared_ptr<const DeviceMesh> Mesh(const std::string& shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::FromString(shape));
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Names in `dir` that start with ".<base>.tmp." (temporary folders left behind).
std::vector<std::string> Leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) out.push_back(name);
  }
  return out;
}

struct RoundTripCase {
  const char* plan;
  const char* mesh;
};

void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.plan << " on " << c.mesh; }

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTrip, ReassemblesByteIdentical) {
  const RoundTripCase& c = GetParam();
  const std::string tag = absl::StrReplaceAll(absl::StrCat(c.plan, "_", c.mesh), {{"-", "_"}});
  const std::string root = test::FreshDir("sharded_checkpoint_" + tag);
  const SafetensorsFile source =
      test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  const ShardingPlan plan = *ShardingPlan::Builtin(c.plan);
  WriteShardedCheckpointOptions options;
  options.source_name = root + "/full.safetensors";
  absl::StatusOr<ShardedCheckpointIndex> written =
      WriteShardedCheckpoint(source, Mesh(c.mesh), plan, root + "/ckpt", options);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->plan, c.plan);
  EXPECT_TRUE(Leftovers(root).empty());
  test::ExpectRoundTrip(root + "/ckpt", source);

  // The index read back is the index written.
  absl::StatusOr<ShardedCheckpointIndex> read = ReadShardedCheckpointIndex(root + "/ckpt");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read->mesh, *written->mesh);
  EXPECT_EQ(read->metadata, source.metadata());
  ASSERT_EQ(read->tensors.size(), written->tensors.size());
  for (size_t i = 0; i < read->tensors.size(); ++i) {
    EXPECT_EQ(read->tensors[i].name, written->tensors[i].name);
    EXPECT_EQ(read->tensors[i].placements, written->tensors[i].placements);
    EXPECT_EQ(read->tensors[i].xxh64, written->tensors[i].xxh64);
    EXPECT_EQ(read->tensors[i].placements,
              *plan.PlacementsFor(read->tensors[i].name, read->tensors[i].shape, *read->mesh));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, RoundTrip,
    ::testing::Values(RoundTripCase{"fsdp", "4"}, RoundTripCase{"fsdp", "3"},
                      RoundTripCase{"fsdp", "1"}, RoundTripCase{"fsdp", "2x2"},
                      RoundTripCase{"fsdp", "2x1x2"}, RoundTripCase{"tp", "4"},
                      RoundTripCase{"tp", "3"}, RoundTripCase{"tp", "2x2"},
                      RoundTripCase{"hsdp", "2x2"}, RoundTripCase{"hsdp", "3x2"},
                      RoundTripCase{"fsdp-tp", "2x2"}, RoundTripCase{"fsdp-tp", "3x2"},
                      RoundTripCase{"fsdp-tp", "2x3"}, RoundTripCase{"fsdp-tp", "1x4"}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      return absl::StrReplaceAll(absl::StrCat(info.param.plan, "_", info.param.mesh), {{"-", "_"}});
    });

TEST(ShardedCheckpoint, EmptyShardsOnDimsSmallerThanTheMesh) {
  const std::string root = test::FreshDir("sharded_checkpoint_empty_shards");
  const SafetensorsFile source = test::WriteSource(
      root + "/full.safetensors", {{"tiny", test::HashBytes({2, 3}, DType::kFloat32, 1)},
                                   {"one", test::HashBytes({1}, DType::kInt64, 2)}});
  ASSERT_TRUE(
      WriteShardedCheckpoint(source, Mesh("4"), *ShardingPlan::Builtin("fsdp"), root + "/ckpt")
          .ok());
  absl::StatusOr<SafetensorsFile> rank3 =
      SafetensorsFile::Open(root + "/ckpt/" + RankFileName(3, 4));
  ASSERT_TRUE(rank3.ok()) << rank3.status();
  EXPECT_EQ(rank3->Find("tiny")->shape, (IntVector{0, 3}));
  EXPECT_EQ(rank3->Find("one")->shape, (IntVector{0}));
  absl::StatusOr<SafetensorsFile> rank0 =
      SafetensorsFile::Open(root + "/ckpt/" + RankFileName(0, 4));
  EXPECT_EQ(rank0->Find("tiny")->shape, (IntVector{1, 3}));
  test::ExpectRoundTrip(root + "/ckpt", source);
}

TEST(ShardedCheckpoint, IndexJsonLayout) {
  const std::string root = test::FreshDir("sharded_checkpoint_layout");
  const SafetensorsFile source = test::WriteSource(
      root + "/full.safetensors",
      {{"model.layers.0.self_attn.q_proj.weight", test::HashBytes({4, 2}, DType::kBFloat16, 3)},
       {"model.norm.weight", test::HashBytes({2}, DType::kFloat32, 4)}});
  auto mesh =
      std::make_shared<const DeviceMesh>(*DeviceMesh::Create(IntVector{2, 2}, {}, {"dp", "tp"}));
  ASSERT_TRUE(
      WriteShardedCheckpoint(source, mesh, *ShardingPlan::Builtin("fsdp-tp"), root + "/ckpt").ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root + "/ckpt")) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "index.json", "rank-00000-of-00004.safetensors", "rank-00001-of-00004.safetensors",
                "rank-00002-of-00004.safetensors", "rank-00003-of-00004.safetensors"}));
  const nlohmann::json index = nlohmann::json::parse(ReadText(root + "/ckpt/index.json"));
  EXPECT_EQ(index["format"], "sdrt-sharded-checkpoint");
  EXPECT_EQ(index["format_version"], 2);
  EXPECT_EQ(index["world_size"], 4);
  EXPECT_EQ(index["mesh"]["shape"], nlohmann::json::array({2, 2}));
  EXPECT_EQ(index["mesh"]["dim_names"], nlohmann::json::array({"dp", "tp"}));
  EXPECT_EQ(index["plan"], "fsdp-tp");
  EXPECT_EQ(index["metadata"]["format"], "pt");
  const nlohmann::json& t = index["tensors"];
  ASSERT_EQ(t.size(), 2u);
  // Source order: the order of the bytes in the file (largest element size first).
  EXPECT_EQ(t[0]["name"], "model.norm.weight");
  EXPECT_EQ(t[0]["dtype"], "F32");
  EXPECT_EQ(t[0]["placements"], "[S(0), R]");
  EXPECT_EQ(t[1]["name"], "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t[1]["dtype"], "BF16");
  EXPECT_EQ(t[1]["shape"], nlohmann::json::array({4, 2}));
  EXPECT_EQ(t[1]["placements"], "[_S(0, 2), S(0)]");
  EXPECT_EQ(t[1]["xxh64"], FormatXxh64(*TensorXxh64(*source.Get(t[1]["name"].get<std::string>()))));
  // Rank files repeat rank, world size and mesh, and record the hash of index.json's text
  // and of each of their pieces, in index order.
  absl::StatusOr<SafetensorsFile> rank2 =
      SafetensorsFile::Open(root + "/ckpt/rank-00002-of-00004.safetensors");
  ASSERT_TRUE(rank2.ok());
  const std::string text = ReadText(root + "/ckpt/index.json");
  Tensor text_bytes = *Tensor::Empty({static_cast<int64_t>(text.size())}, DType::kUInt8);
  std::memcpy(text_bytes.data_ptr(), text.data(), text.size());
  const std::string pieces =
      FormatXxh64(*TensorXxh64(*rank2->Get("model.norm.weight"))) +
      FormatXxh64(*TensorXxh64(*rank2->Get("model.layers.0.self_attn.q_proj.weight")));
  EXPECT_EQ(rank2->metadata(), (std::map<std::string, std::string>{
                                   {"sdrt.format_version", "2"},
                                   {"sdrt.index_xxh64", FormatXxh64(*TensorXxh64(text_bytes))},
                                   {"sdrt.mesh", "2x2"},
                                   {"sdrt.mesh_dim_names", "dp,tp"},
                                   {"sdrt.piece_xxh64", pieces},
                                   {"sdrt.rank", "2"},
                                   {"sdrt.world_size", "4"}}));
  absl::StatusOr<ShardedCheckpointIndex> read = ReadShardedCheckpointIndex(root + "/ckpt");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->mesh->dim_names(), (std::vector<std::string>{"dp", "tp"}));
}

TEST(Xxh64, PublishedVectorsAndLayout) {
  // XXH64 test vectors (seed 0): "" and "abc".
  Tensor empty = *Tensor::Empty({0}, DType::kUInt8);
  EXPECT_EQ(FormatXxh64(*TensorXxh64(empty)), "ef46db3751d8e999");
  Tensor abc = *Tensor::Empty({3}, DType::kUInt8);
  std::memcpy(abc.data_ptr(), "abc", 3);
  EXPECT_EQ(FormatXxh64(*TensorXxh64(abc)), "44bc2cf5ad770999");
  // A non-contiguous view hashes as its contiguous copy.
  Tensor m = test::Arange({4, 3});
  Tensor col = *m.Narrow(1, 1, 1);
  EXPECT_EQ(*TensorXxh64(col), *TensorXxh64(*col.Clone()));
  EXPECT_NE(*TensorXxh64(col), *TensorXxh64(*m.Narrow(1, 0, 1)->Clone()));
  EXPECT_EQ(FormatXxh64(0x1), "0000000000000001");
}

// The same value by an independent implementation: the Python xxhash package, else the
// xxhsum command line (Debian package xxhash); skipped when neither is installed.
TEST(Xxh64, AgreesWithAnIndependentImplementation) {
  const std::string path = (fs::path(test::TestTmpRoot()) / "xxh64_golden.bin").string();
  Tensor t = test::HashBytes({1000, 3}, DType::kFloat32, 42);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  const std::string expected = FormatXxh64(*TensorXxh64(t));
  auto run = [](const std::string& command, std::string* output) {
    FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
    if (pipe == nullptr) return -1;
    char buffer[512];
    size_t n = 0;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
    const int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  if (run("python3 -c \"import xxhash,sys; print(xxhash.xxh64(open(sys.argv[1],'rb').read())"
          ".hexdigest())\" " +
              path,
          &out) == 0) {
    EXPECT_EQ(out.substr(0, 16), expected) << "python xxhash: " << out;
    return;
  }
  out.clear();
  if (run("xxhsum -H1 " + path, &out) == 0) {
    EXPECT_EQ(out.substr(0, 16), expected) << "xxhsum: " << out;
    return;
  }
  GTEST_SKIP() << "neither the Python xxhash package nor xxhsum is installed";
}

TEST(LoadRankShards, EveryRankAsDTensors) {
  const std::string root = test::FreshDir("sharded_checkpoint_load");
  const SafetensorsFile source =
      test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  auto mesh = Mesh("3x2");
  ASSERT_TRUE(
      WriteShardedCheckpoint(source, mesh, *ShardingPlan::Builtin("fsdp-tp"), root + "/ckpt").ok());
  for (int64_t r = 0; r < 6; ++r) {
    absl::StatusOr<RankShards> shards = LoadRankShards(root + "/ckpt", r);
    ASSERT_TRUE(shards.ok()) << shards.status();
    EXPECT_EQ(shards->rank, r);
    ASSERT_EQ(shards->tensors.size(), source.entries().size());
    absl::StatusOr<SafetensorsFile> file =
        SafetensorsFile::Open(root + "/ckpt/" + RankFileName(r, 6));
    for (const auto& [name, dtensor] : shards->tensors) {
      const ShardedCheckpointTensor* t = shards->index.Find(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(*dtensor.mesh(), *mesh);
      EXPECT_EQ(dtensor.placements(), t->placements);
      EXPECT_EQ(dtensor.global_shape(), t->shape);
      EXPECT_EQ(dtensor.dtype(), t->dtype);
      EXPECT_EQ(dtensor.local().shape(), *ComputeLocalShape(t->shape, *mesh, t->placements, r));
      EXPECT_TRUE(
          ValidateLocalShape(dtensor.local().shape(), t->shape, *mesh, t->placements, r, name)
              .ok());
      const Tensor expected = *file->Get(name);
      if (expected.nbytes() > 0) {
        EXPECT_EQ(std::memcmp(dtensor.local().data_ptr(), expected.data_ptr(), expected.nbytes()),
                  0)
            << name;
      }
    }
    const Map sd = shards->ToStateDict();
    EXPECT_EQ(sd.size(), shards->tensors.size());
  }
  absl::StatusOr<RankShards> bad = LoadRankShards(root + "/ckpt", 6);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("rank 6 is not in [0, 6)"));
  bad = LoadRankShards(root + "/ckpt", -1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("rank -1 is not in [0, 6)"));
}

TEST(WriteShardedCheckpoint, PlanThatNeedsATwoDimMeshLeavesNothing) {
  const std::string root = test::FreshDir("sharded_checkpoint_needs_2d");
  const SafetensorsFile source =
      test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  for (const char* plan : {"hsdp", "fsdp-tp"}) {
    absl::StatusOr<ShardedCheckpointIndex> written =
        WriteShardedCheckpoint(source, Mesh("4"), *ShardingPlan::Builtin(plan), root + "/ckpt");
    EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(written.status().message(), AllOf(HasSubstr(plan), HasSubstr("2-D mesh")));
  }
  EXPECT_FALSE(fs::exists(root + "/ckpt"));
  EXPECT_TRUE(Leftovers(root).empty());
}

TEST(WriteShardedCheckpoint, CustomPlanErrorsNameSourceTensorAndRule) {
  const std::string root = test::FreshDir("sharded_checkpoint_custom_error");
  const SafetensorsFile source =
      test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  const ShardingPlan plan = *ShardingPlan::FromJson(
      R"({"rules": [{"pattern": "bias$", "placements": "[S(1)]"}]})", "PLAN.json");
  WriteShardedCheckpointOptions options;
  options.source_name = "full.safetensors";
  absl::StatusOr<ShardedCheckpointIndex> written =
      WriteShardedCheckpoint(source, Mesh("2"), plan, root + "/ckpt", options);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(written.status().message(),
              AllOf(HasSubstr("full.safetensors"), HasSubstr("PLAN.json"),
                    HasSubstr("rule 0 (\"bias$\")"), HasSubstr(".bias of shape [")));
  EXPECT_FALSE(fs::exists(root + "/ckpt"));
  EXPECT_TRUE(Leftovers(root).empty());
}

TEST(WriteShardedCheckpoint, MeshMustBeRowMajorOverZeroToN) {
  const std::string root = test::FreshDir("sharded_checkpoint_mesh_ranks");
  const SafetensorsFile source =
      test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create(IntVector{2}, {1, 0}));
  absl::StatusOr<ShardedCheckpointIndex> written =
      WriteShardedCheckpoint(source, mesh, *ShardingPlan::Builtin("fsdp"), root + "/ckpt");
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(written.status().message(), HasSubstr("row-major"));
}

TEST(WriteShardedCheckpoint, ReplacesOnlyWhatItMay) {
  const std::string root = test::FreshDir("sharded_checkpoint_replace");
  const SafetensorsFile source =
      test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  const ShardingPlan fsdp = *ShardingPlan::Builtin("fsdp");
  const ShardingPlan tp = *ShardingPlan::Builtin("tp");

  // An empty folder is replaced.
  fs::create_directories(root + "/ckpt");
  ASSERT_TRUE(WriteShardedCheckpoint(source, Mesh("2"), fsdp, root + "/ckpt/").ok());
  // An existing checkpoint only with overwrite; the old one stays until then.
  absl::StatusOr<ShardedCheckpointIndex> again =
      WriteShardedCheckpoint(source, Mesh("4"), tp, root + "/ckpt");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("overwrite"));
  EXPECT_EQ(ReadShardedCheckpointIndex(root + "/ckpt")->world_size, 2);
  WriteShardedCheckpointOptions overwrite;
  overwrite.overwrite = true;
  ASSERT_TRUE(WriteShardedCheckpoint(source, Mesh("4"), tp, root + "/ckpt", overwrite).ok());
  absl::StatusOr<ShardedCheckpointIndex> now = ReadShardedCheckpointIndex(root + "/ckpt");
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->world_size, 4);
  EXPECT_EQ(now->plan, "tp");
  EXPECT_FALSE(fs::exists(root + "/ckpt/rank-00000-of-00002.safetensors"));
  test::ExpectRoundTrip(root + "/ckpt", source);
  EXPECT_TRUE(Leftovers(root).empty());

  // A folder that is not a checkpoint, and a file, are never replaced.
  fs::create_directories(root + "/other");
  WriteText(root + "/other/keep.txt", "keep");
  absl::StatusOr<ShardedCheckpointIndex> other =
      WriteShardedCheckpoint(source, Mesh("2"), fsdp, root + "/other", overwrite);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.status().message(), HasSubstr("not a sharded checkpoint"));
  EXPECT_EQ(ReadText(root + "/other/keep.txt"), "keep");
  absl::StatusOr<ShardedCheckpointIndex> file =
      WriteShardedCheckpoint(source, Mesh("2"), fsdp, root + "/full.safetensors", overwrite);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(file.status().message(),
              HasSubstr("full.safetensors: exists and is not a folder; refusing to replace it"));
  EXPECT_TRUE(Leftovers(root).empty());
  // A missing parent folder.
  absl::StatusOr<ShardedCheckpointIndex> orphan =
      WriteShardedCheckpoint(source, Mesh("2"), fsdp, root + "/no/such/ckpt");
  EXPECT_EQ(orphan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(orphan.status().message(), HasSubstr(root + "/no/such"));
}

// A good checkpoint to break in the tests below: 4 ranks, fsdp.
class Corrupted : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(
        absl::StrCat("sharded_checkpoint_corrupt_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    source_ = std::make_unique<SafetensorsFile>(
        test::WriteSource(root_ + "/full.safetensors", test::MixedStateDict()));
    dir_ = root_ + "/ckpt";
    ASSERT_TRUE(
        WriteShardedCheckpoint(*source_, Mesh("2x2"), *ShardingPlan::Builtin("hsdp"), dir_).ok());
    index_ = nlohmann::ordered_json::parse(ReadText(dir_ + "/index.json"));
  }

  // Writes `index` as index.json and expects ReadShardedCheckpointIndex to fail with
  // InvalidArgument naming each of `parts`.
  void ExpectIndexError(const nlohmann::ordered_json& index,
                        const std::vector<std::string>& parts) {
    WriteText(dir_ + "/index.json", index.dump());
    ExpectError(parts);
  }
  void ExpectError(const std::vector<std::string>& parts) {
    absl::StatusOr<ShardedCheckpointIndex> read = ReadShardedCheckpointIndex(dir_);
    ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << read.status();
    for (const std::string& p : parts) EXPECT_THAT(read.status().message(), HasSubstr(p));
    EXPECT_EQ(std::string(read.status().message()).find('\n'), std::string::npos);
  }

  std::string root_;
  std::string dir_;
  std::unique_ptr<SafetensorsFile> source_;
  nlohmann::ordered_json index_;
};

TEST_F(Corrupted, MissingRankFile) {
  fs::remove(dir_ + "/rank-00002-of-00004.safetensors");
  ExpectError({"rank-00002-of-00004.safetensors", "missing"});
  absl::Status load = LoadRankShards(dir_, 0).status();
  EXPECT_EQ(load.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(load.message(), HasSubstr("rank-00002-of-00004.safetensors: rank file 2 of 4 is "
                                        "missing"));
}

TEST_F(Corrupted, MissingIndexAndFolder) {
  fs::remove(dir_ + "/index.json");
  ExpectError({dir_ + "/index.json", "not a sharded checkpoint"});
  absl::StatusOr<ShardedCheckpointIndex> none = ReadShardedCheckpointIndex(root_ + "/nothing");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr(root_ + "/nothing"));
  absl::StatusOr<ShardedCheckpointIndex> file =
      ReadShardedCheckpointIndex(root_ + "/full.safetensors");
  EXPECT_THAT(file.status().message(), HasSubstr("not a folder"));
}

TEST_F(Corrupted, BadJson) {
  const std::string text = ReadText(dir_ + "/index.json");
  WriteText(dir_ + "/index.json", text.substr(0, text.size() / 2));
  ExpectError({"index.json", "not valid JSON"});
}

TEST_F(Corrupted, Fields) {
  nlohmann::ordered_json j = index_;
  j["format_version"] = 3;
  ExpectIndexError(j, {"index.json", "format_version 3", "1 to 2"});
  j = index_;
  j["format"] = "other";
  ExpectIndexError(j, {"\"format\" is \"other\""});
  j = index_;
  j.erase("tensors");
  ExpectIndexError(j, {"missing field \"tensors\""});
  j = index_;
  j["extra"] = 1;
  ExpectIndexError(j, {"unknown field \"extra\""});
  j = index_;
  j["world_size"] = 8;
  ExpectIndexError(j, {"mesh 2x2", "world_size 8"});
  j = index_;
  j["world_size"] = "4";
  ExpectIndexError(j, {"\"world_size\" must be an integer"});
  j = index_;
  j["mesh"]["dim_names"] = {"a", "a"};
  ExpectIndexError(j, {"index.json"});
  j = index_;
  j["files"][1] = "rank-1.safetensors";
  ExpectIndexError(j, {"\"files\"[1]", "rank-00001-of-00004.safetensors"});
  j = index_;
  j["metadata"]["x"] = 3;
  ExpectIndexError(j, {"metadata.x"});
}

TEST_F(Corrupted, TensorEntries) {
  const std::string name = index_["tensors"][0]["name"];
  nlohmann::ordered_json j = index_;
  j["tensors"][0]["placements"] = "[R, S(5)]";
  ExpectIndexError(j, {"tensors[0]", name, "S(5)", "shards dim 5"});
  j = index_;
  j["tensors"][0]["placements"] = "[S(0)]";
  ExpectIndexError(j, {name, "one per mesh dim"});
  j = index_;
  j["tensors"][0]["placements"] = "[R, P(sum)]";
  ExpectIndexError(j, {name, "Partial"});
  j = index_;
  j["tensors"][0]["placements"] = "[R, X]";
  ExpectIndexError(j, {name});
  j = index_;
  j["tensors"][0]["dtype"] = "F33";
  ExpectIndexError(j, {name, "F33"});
  j = index_;
  j["tensors"][0]["shape"] = {-1, 2};
  ExpectIndexError(j, {name, "shape"});
  j = index_;
  j["tensors"][0]["xxh64"] = "XYZ";
  ExpectIndexError(j, {name, "16 lower-case hex digits"});
  j = index_;
  j["tensors"][1]["name"] = name;
  ExpectIndexError(j, {"duplicate tensor name", name});
  j = index_;
  j["tensors"][0]["name"] = "";
  ExpectIndexError(j, {"tensors[0]", "invalid tensor name"});
}

TEST_F(Corrupted, ShapeInconsistentWithRankFiles) {
  nlohmann::ordered_json j = index_;
  // Find a sharded 2-D tensor and make its global shape larger than its pieces.
  size_t i = 0;
  while (j["tensors"][i]["shape"].size() != 2 || j["tensors"][i]["shape"][0] < 4) ++i;
  const std::string name = j["tensors"][i]["name"];
  j["tensors"][i]["shape"][0] = j["tensors"][i]["shape"][0].get<int64_t>() + 4;
  ExpectIndexError(j, {"rank-00000-of-00004.safetensors", name, "holds"});
  j = index_;
  j["tensors"][i]["dtype"] = j["tensors"][i]["dtype"] == "F32" ? "I32" : "F32";
  ExpectIndexError(j, {"rank-00000-of-00004.safetensors", name, "the index says"});
  // A tensor the index lacks, and one the rank files lack.
  j = index_;
  j["tensors"].erase(j["tensors"].begin() + static_cast<std::ptrdiff_t>(i));
  ExpectIndexError(j, {name, "is not in the index"});
  j = index_;
  j["tensors"].push_back({{"name", "ghost"},
                          {"dtype", "F32"},
                          {"shape", {2}},
                          {"placements", "[R, R]"},
                          {"xxh64", "0000000000000000"}});
  ExpectIndexError(j, {"ghost", "is missing"});
  // Without opening the rank files the index alone is fine.
  ReadShardedCheckpointOptions headers_only;
  headers_only.check_rank_files = false;
  EXPECT_TRUE(ReadShardedCheckpointIndex(dir_, headers_only).ok());
  absl::Status load = LoadRankShards(dir_, 1).status();
  EXPECT_EQ(load.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(load.message(), HasSubstr("tensor ghost of the index is missing"));
}

TEST_F(Corrupted, SwappedRankFiles) {
  fs::rename(dir_ + "/rank-00001-of-00004.safetensors", dir_ + "/swap");
  fs::rename(dir_ + "/rank-00002-of-00004.safetensors", dir_ + "/rank-00001-of-00004.safetensors");
  fs::rename(dir_ + "/swap", dir_ + "/rank-00002-of-00004.safetensors");
  ExpectError({"rank-00001-of-00004.safetensors", "sdrt.rank", "\"2\"", "\"1\""});
  absl::StatusOr<RankShards> loaded = LoadRankShards(dir_, 1);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("__metadata__ \"sdrt.rank\" is \"2\" but the index says \"1\""));
  EXPECT_TRUE(LoadRankShards(dir_, 0).ok());
}

TEST_F(Corrupted, TruncatedRankFile) {
  fs::resize_file(dir_ + "/rank-00003-of-00004.safetensors", 20);
  ExpectError({"rank-00003-of-00004.safetensors"});
}

// The real all-MiniLM-L6-v2 checkpoint (the minilm fixture, tests/support/minilm.h).
TEST(MiniLM, TpAndFsdpTpRoundTrip) {
  SDRT_MINILM_OR_SKIP(path);
  absl::StatusOr<SafetensorsFile> source = SafetensorsFile::Open(path);
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string root = test::FreshDir("sharded_checkpoint_minilm");
  for (const auto& [plan, mesh] : std::vector<std::pair<const char*, const char*>>{
           {"tp", "4"}, {"tp", "3"}, {"fsdp-tp", "2x2"}, {"fsdp-tp", "3x2"}}) {
    SCOPED_TRACE(absl::StrCat(plan, " on ", mesh));
    const std::string dir = absl::StrCat(root, "/", plan, "_", mesh);
    absl::StatusOr<ShardedCheckpointIndex> written =
        WriteShardedCheckpoint(*source, Mesh(mesh), *ShardingPlan::Builtin(plan), dir);
    ASSERT_TRUE(written.ok()) << written.status();
    const ShardedCheckpointTensor* query =
        written->Find("encoder.layer.0.attention.self.query.weight");
    ASSERT_NE(query, nullptr);
    EXPECT_EQ(PlacementsToString(query->placements),
              std::string(plan) == "tp" ? "[S(0)]"
                                        : absl::StrCat("[_S(0, ", Mesh(mesh)->size(1), "), S(0)]"));
    test::ExpectRoundTrip(dir, *source);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace sdrt
