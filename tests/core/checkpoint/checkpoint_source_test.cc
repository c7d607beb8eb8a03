// CheckpointSource (core/checkpoint/checkpoint_source.h): a single file, a Hugging Face
// folder (model.safetensors.index.json + shard files) and a folder of safetensors files
// read as one checkpoint, equal to the single-file equivalent; every rule of case-054; an
// sdrt sharded folder listed from its index.
#include "sdrt/core/checkpoint/checkpoint_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tests/core/checkpoint/checkpoint_source_test_util.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
}

// The bytes [offset, offset + n) of the file at `path`, read with pread.
std::string Pread(const std::string& path, int64_t offset, int64_t n) {
  std::string out(static_cast<size_t>(n), '\0');
  const int fd = open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(pread(fd, out.data(), out.size(), offset), n) << path;
  close(fd);
  return out;
}

// Expects `status` to be `code` with a message naming each of `parts`.
void ExpectError(const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& p : parts) EXPECT_THAT(status.message(), HasSubstr(p));
}

class CheckpointSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(absl::StrCat(
        "checkpoint_source_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    tensors_ = test::MixedStateDict();
    single_ = root_ + "/single.safetensors";
    ASSERT_TRUE(WriteSafetensors(single_, tensors_, {{"format", "pt"}}).ok());
  }

  std::string root_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::string single_;
};

// A 3-file Hugging Face folder is the single file: the same tensors, dtypes, shapes and
// bytes (through Get and through pread at offset/nbytes), the same total and metadata.
TEST_F(CheckpointSourceTest, Case054HfFolderEqualsSingleFile) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 3);
  absl::StatusOr<CheckpointSource> hf = CheckpointSource::Open(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<CheckpointSource> one = CheckpointSource::Open(single_);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(hf->kind(), CheckpointKind::kHfFolder);
  EXPECT_EQ(one->kind(), CheckpointKind::kSafetensorsFile);
  ASSERT_EQ(hf->files().size(), 3u);
  EXPECT_EQ(hf->files()[0].name, test::HfShardName(0, 3));
  EXPECT_EQ(hf->files()[2].path, dir + "/" + test::HfShardName(2, 3));
  ASSERT_EQ(hf->tensors().size(), tensors_.size());
  EXPECT_EQ(hf->total_bytes(), one->total_bytes());
  EXPECT_GT(hf->total_bytes(), 0);
  EXPECT_EQ(hf->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(hf->index_metadata().at("total_size"), std::to_string(one->total_bytes()));
  int last_file = 0;
  for (const CheckpointSourceTensor& t : hf->tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_GE(t.file, last_file);  // files in order
    last_file = t.file;
    const CheckpointSourceTensor* ref = one->Find(t.name);
    ASSERT_NE(ref, nullptr);
    EXPECT_EQ(t.dtype, ref->dtype);
    EXPECT_EQ(t.shape, ref->shape);
    EXPECT_EQ(t.nbytes, ref->nbytes);
    EXPECT_EQ(hf->Find(t.name), &t);
    absl::StatusOr<Tensor> got = hf->Get(t.name);
    absl::StatusOr<Tensor> want = one->Get(t.name);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(Bytes(*got), Bytes(*want));
    EXPECT_EQ(Pread(hf->files()[static_cast<size_t>(t.file)].path, t.offset, t.nbytes),
              Bytes(*want));
  }
  ExpectError(hf->Get("nope").status(), absl::StatusCode::kNotFound, {dir, "nope"});
}

// A folder of safetensors files without an index: accepted, files in name order.
TEST_F(CheckpointSourceTest, FolderWithoutIndex) {
  const std::string dir = root_ + "/plain";
  test::WriteHfFolder(dir, tensors_, 2);
  fs::remove(dir + "/model.safetensors.index.json");
  EXPECT_EQ(*DetectCheckpointKind(dir), CheckpointKind::kSafetensorsFolder);
  absl::StatusOr<CheckpointSource> src = CheckpointSource::Open(dir);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->kind(), CheckpointKind::kSafetensorsFolder);
  ASSERT_EQ(src->files().size(), 2u);
  EXPECT_EQ(src->files()[1].name, test::HfShardName(1, 2));
  ASSERT_EQ(src->tensors().size(), tensors_.size());
  for (const auto& [name, tensor] : tensors_) {
    absl::StatusOr<Tensor> got = src->Get(name);
    ASSERT_TRUE(got.ok()) << name;
    EXPECT_EQ(Bytes(*got), Bytes(tensor.Contiguous().value())) << name;
  }
  // The same name in two files is refused, naming both.
  ASSERT_TRUE(WriteSafetensors(dir + "/extra.safetensors", {tensors_[0]}).ok());
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, tensors_[0].first, "extra.safetensors", "in both"});
}

// Case-054: the index maps "w" to file 1, but "w" is in file 1 and file 2.
TEST_F(CheckpointSourceTest, Case054TensorInTwoFiles) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 2);
  const std::string second = test::HfShardName(1, 2);
  // Rewrite file 2 with "w" added; the index stays as it was (w -> file 1).
  absl::StatusOr<SafetensorsFile> f2 = SafetensorsFile::Open(dir + "/" + second);
  ASSERT_TRUE(f2.ok());
  std::vector<std::pair<std::string, Tensor>> rewritten;
  for (const SafetensorsEntry& e : f2->entries()) rewritten.emplace_back(e.name, *f2->Get(e.name));
  rewritten.emplace_back(tensors_[0].first, tensors_[0].second);
  ASSERT_TRUE(WriteSafetensors(dir + "/" + second + ".new", rewritten, {{"format", "pt"}}).ok());
  fs::rename(dir + "/" + second + ".new", dir + "/" + second);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, "\"" + tensors_[0].first + "\"", test::HfShardName(0, 2), second, "in both",
               "maps it to " + test::HfShardName(0, 2)});
}

// Case-054: weight_map names "../outside.safetensors" (and other paths out of the folder).
TEST_F(CheckpointSourceTest, Case054PathOutsideFolder) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 2);
  ASSERT_TRUE(WriteSafetensors(root_ + "/outside.safetensors", {tensors_[0]}).ok());
  for (const std::string& bad :
       {std::string("../outside.safetensors"), root_ + "/outside.safetensors",
        std::string("sub/x.safetensors"), std::string("..")}) {
    SCOPED_TRACE(bad);
    Json index = test::ReadHfIndex(dir);
    index["weight_map"][tensors_[0].first] = bad;
    test::WriteHfIndex(dir, index);
    ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
                {dir + "/model.safetensors.index.json", bad, tensors_[0].first});
  }
  // A link in the folder to a file outside it is refused without being opened...
  test::WriteHfFolder(dir, tensors_, 2);
  fs::rename(dir + "/" + test::HfShardName(1, 2), root_ + "/moved.safetensors");
  fs::create_symlink(root_ + "/moved.safetensors", dir + "/" + test::HfShardName(1, 2));
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, test::HfShardName(1, 2), "outside the folder"});
  // ...and a link to a file inside it is followed.
  fs::remove(dir + "/" + test::HfShardName(1, 2));
  fs::rename(root_ + "/moved.safetensors", dir + "/real.bin");
  fs::create_symlink("real.bin", dir + "/" + test::HfShardName(1, 2));
  absl::StatusOr<CheckpointSource> linked = CheckpointSource::Open(dir);
  ASSERT_TRUE(linked.ok()) << linked.status();
  EXPECT_EQ(linked->tensors().size(), tensors_.size());
}

// Case-054: weight_map lacks a tensor that a file holds; and the reverse.
TEST_F(CheckpointSourceTest, Case054MapLacksTensor) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 3);
  const Json good = test::ReadHfIndex(dir);
  Json index = good;
  const std::string name = tensors_[5].first;
  const std::string file = index["weight_map"][name];
  index["weight_map"].erase(name);
  test::WriteHfIndex(dir, index);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, "\"" + name + "\"", file, "does not name it"});
  // The map names a tensor the file lacks.
  index = good;
  index["weight_map"]["ghost.weight"] = test::HfShardName(1, 3);
  test::WriteHfIndex(dir, index);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, "\"ghost.weight\"", test::HfShardName(1, 3), "does not hold it"});
  // The map puts a tensor in the wrong file.
  index = good;
  index["weight_map"][name] =
      file == test::HfShardName(0, 3) ? test::HfShardName(1, 3) : test::HfShardName(0, 3);
  test::WriteHfIndex(dir, index);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, "\"" + name + "\"", file, "maps it to"});
}

// Case-054: total_size disagrees with the files.
TEST_F(CheckpointSourceTest, Case054TotalSizeDisagrees) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 3);
  Json index = test::ReadHfIndex(dir);
  const int64_t total = index["metadata"]["total_size"];
  index["metadata"]["total_size"] = total + 1;
  test::WriteHfIndex(dir, index);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir + "/model.safetensors.index.json", "total_size", std::to_string(total + 1),
               std::to_string(total), test::HfShardName(0, 3)});
  for (const Json& bad : {Json(-1), Json("12"), Json(1.5)}) {
    index["metadata"]["total_size"] = bad;
    test::WriteHfIndex(dir, index);
    ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
                {"total_size", "integer"});
  }
  // Without total_size the files alone decide.
  index["metadata"].erase("total_size");
  test::WriteHfIndex(dir, index);
  EXPECT_TRUE(CheckpointSource::Open(dir).ok());
}

// Duplicate keys, a missing or non-regular shard file, conflicting metadata.
TEST_F(CheckpointSourceTest, HostileFolders) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 2);
  const std::string index_path = dir + "/model.safetensors.index.json";
  const Json good = test::ReadHfIndex(dir);
  std::string text = good.dump();
  const std::string key = "\"" + tensors_[1].first + "\":";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.insert(at, key + "\"" + test::HfShardName(1, 2) + "\",");
  { std::ofstream(index_path, std::ios::trunc) << text; }
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {index_path, "duplicate key", tensors_[1].first});

  test::WriteHfIndex(dir, good);
  fs::remove(dir + "/" + test::HfShardName(1, 2));
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kNotFound,
              {dir, test::HfShardName(1, 2), "missing"});
  ASSERT_EQ(mkfifo((dir + "/" + test::HfShardName(1, 2)).c_str(), 0600), 0);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, test::HfShardName(1, 2), "not a regular file"});

  test::WriteHfFolder(dir, tensors_, 2);
  fs::remove(dir + "/model.safetensors.index.json");
  ASSERT_EQ(mkfifo(index_path.c_str(), 0600), 0);
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {index_path, "not a regular file"});

  // Two files disagreeing on a __metadata__ value.
  test::WriteHfFolder(dir, tensors_, 2, {{"format", "np"}});
  ExpectError(CheckpointSource::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir, "\"format\"", test::HfShardName(0, 2), test::HfShardName(1, 2)});
}

TEST_F(CheckpointSourceTest, DetectKinds) {
  EXPECT_EQ(*DetectCheckpointKind(single_), CheckpointKind::kSafetensorsFile);
  const std::string sharded = root_ + "/sharded";
  ASSERT_TRUE(
      WriteShardedCheckpoint(*SafetensorsFile::Open(single_),
                             std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2")),
                             *ShardingPlan::Builtin("fsdp"), sharded)
          .ok());
  EXPECT_EQ(*DetectCheckpointKind(sharded), CheckpointKind::kShardedFolder);
  {
    // Listed from its index as the single file lists them: names, dtypes, global shapes,
    // bytes, metadata; no file holds a whole tensor.
    absl::StatusOr<CheckpointSource> folder = CheckpointSource::Open(sharded);
    ASSERT_TRUE(folder.ok()) << folder.status();
    absl::StatusOr<CheckpointSource> one = CheckpointSource::Open(single_);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(folder->kind(), CheckpointKind::kShardedFolder);
    ASSERT_NE(folder->sharded_index(), nullptr);
    EXPECT_EQ(folder->sharded_index()->world_size, 2);
    EXPECT_EQ(one->sharded_index(), nullptr);
    EXPECT_TRUE(folder->files().empty());
    ASSERT_EQ(folder->tensors().size(), one->tensors().size());
    for (size_t i = 0; i < one->tensors().size(); ++i) {
      const CheckpointSourceTensor& a = folder->tensors()[i];
      const CheckpointSourceTensor& b = one->tensors()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.dtype, b.dtype);
      EXPECT_EQ(a.shape, b.shape);
      EXPECT_EQ(a.nbytes, b.nbytes);
      EXPECT_EQ(a.file, -1);
      EXPECT_EQ(folder->Find(a.name), &a);
    }
    EXPECT_EQ(folder->total_bytes(), one->total_bytes());
    EXPECT_EQ(folder->metadata(), one->metadata());
    ExpectError(folder->Get(one->tensors()[0].name).status(), absl::StatusCode::kInvalidArgument,
                {sharded, one->tensors()[0].name, "rank files"});
    ExpectError(WriteShardedCheckpoint(
                    *folder, std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2")),
                    *ShardingPlan::Builtin("fsdp"), root_ + "/again")
                    .status(),
                absl::StatusCode::kInvalidArgument, {sharded, "not a full checkpoint"});
    EXPECT_FALSE(fs::exists(root_ + "/again"));
  }
  fs::remove(sharded + "/index.json");  // rank files alone still read as a sharded folder
  EXPECT_EQ(*DetectCheckpointKind(sharded), CheckpointKind::kShardedFolder);
  ExpectError(CheckpointSource::Open(sharded).status(), absl::StatusCode::kInvalidArgument,
              {sharded, "index.json"});
  const std::string empty = root_ + "/empty";
  fs::create_directories(empty);
  ExpectError(DetectCheckpointKind(empty).status(), absl::StatusCode::kInvalidArgument,
              {empty, "index.json", "model.safetensors.index.json"});
  ExpectError(DetectCheckpointKind(root_ + "/missing").status(), absl::StatusCode::kNotFound,
              {root_ + "/missing"});
}

// sdrt shard from a Hugging Face folder writes the checkpoint the single file gives.
TEST_F(CheckpointSourceTest, ShardFromHfFolderEqualsSingleFile) {
  const std::string dir = root_ + "/hf";
  test::WriteHfFolder(dir, tensors_, 3);
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2x2"));
  const ShardingPlan plan = *ShardingPlan::Builtin("fsdp-tp");
  absl::StatusOr<ShardedCheckpointIndex> from_hf =
      WriteShardedCheckpoint(*CheckpointSource::Open(dir), mesh, plan, root_ + "/from_hf");
  ASSERT_TRUE(from_hf.ok()) << from_hf.status();
  absl::StatusOr<SafetensorsFile> one = SafetensorsFile::Open(single_);
  ASSERT_TRUE(one.ok());
  absl::StatusOr<ShardedCheckpointIndex> from_one =
      WriteShardedCheckpoint(*one, mesh, plan, root_ + "/from_one");
  ASSERT_TRUE(from_one.ok()) << from_one.status();
  ASSERT_EQ(from_hf->tensors.size(), from_one->tensors.size());
  EXPECT_EQ(from_hf->metadata, from_one->metadata);
  for (const ShardedCheckpointTensor& t : from_hf->tensors) {
    const ShardedCheckpointTensor* ref = from_one->Find(t.name);
    ASSERT_NE(ref, nullptr) << t.name;
    EXPECT_EQ(t.xxh64, ref->xxh64) << t.name;
    EXPECT_EQ(PlacementsToString(t.placements), PlacementsToString(ref->placements)) << t.name;
  }
  // Every rank file holds the same pieces, byte for byte (the order of the index differs:
  // the folder's is by file, the single file's by element size).
  for (int64_t r = 0; r < from_hf->world_size; ++r) {
    absl::StatusOr<SafetensorsFile> a = SafetensorsFile::Open(from_hf->RankFilePath(r));
    absl::StatusOr<SafetensorsFile> b = SafetensorsFile::Open(from_one->RankFilePath(r));
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->entries().size(), b->entries().size());
    // The same metadata but for the hashes of the index text and of the pieces in index
    // order, which follow the order.
    auto a_meta = a->metadata();
    auto b_meta = b->metadata();
    for (const char* ordered : {"sdrt.index_xxh64", "sdrt.piece_xxh64"}) {
      EXPECT_EQ(a_meta.erase(ordered), 1u) << ordered << " rank " << r;
      EXPECT_EQ(b_meta.erase(ordered), 1u) << ordered << " rank " << r;
    }
    EXPECT_EQ(a_meta, b_meta);
    for (const SafetensorsEntry& e : b->entries()) {
      absl::StatusOr<Tensor> got = a->Get(e.name);
      ASSERT_TRUE(got.ok()) << e.name << " rank " << r;
      EXPECT_EQ(Bytes(*got), Bytes(*b->Get(e.name))) << e.name << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace sdrt
