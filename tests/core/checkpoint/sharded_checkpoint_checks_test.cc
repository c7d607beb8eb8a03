// Sharded checkpoints: every piece read is checked (LoadRankShards). A flipped data byte,
// an index.json edited to another placement with the same local shapes or to another hash,
// a rank file without its hashes: InvalidArgument naming the file. Format 1 folders are read,
// saying what cannot be checked. The writers hash the pieces they write.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

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

// Rewrites safetensors file `path` with its tensors and `metadata` instead of its own.
void RewriteMetadata(const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    for (const SafetensorsEntry& e : file->entries()) {
      tensors.emplace_back(e.name, *file->Get(e.name)->Clone());
    }
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
}

// A checkpoint of test::MixedStateDict with hsdp ([R, S(0)]) on a 2x2 mesh.
class PieceChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(
        absl::StrCat("sharded_checkpoint_checks_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    const SafetensorsFile source =
        test::WriteSource(root_ + "/full.safetensors", test::MixedStateDict());
    dir_ = root_ + "/ckpt";
    auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2x2"));
    ASSERT_TRUE(WriteShardedCheckpoint(source, mesh, *ShardingPlan::Builtin("hsdp"), dir_).ok());
    index_ = nlohmann::ordered_json::parse(ReadText(dir_ + "/index.json"));
  }

  std::string RankFile(int rank) const { return dir_ + "/" + RankFileName(rank, 4); }

  // Flips one bit of tensor `name`'s first byte in rank file `rank`.
  void FlipByte(int rank, const std::string& name) {
    const std::string path = RankFile(rank);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    const int64_t at = file->data_offset() + file->Find(name)->data_begin;
    std::string bytes = ReadText(path);
    bytes[static_cast<size_t>(at)] ^= 0x10;
    WriteText(path, bytes);
  }

  // Index entry `name` of index_.
  nlohmann::ordered_json& Entry(nlohmann::ordered_json& index, const std::string& name) {
    for (nlohmann::ordered_json& t : index["tensors"]) {
      if (t["name"] == name) return t;
    }
    ADD_FAILURE() << name;
    return index["tensors"][0];
  }

  // Expects LoadRankShards(dir_, rank) to fail with InvalidArgument naming each of `parts`.
  void ExpectLoadError(int rank, const std::vector<std::string>& parts) {
    absl::StatusOr<RankShards> loaded = LoadRankShards(dir_, rank);
    ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    for (const std::string& p : parts) EXPECT_THAT(loaded.status().message(), HasSubstr(p));
  }

  std::string root_;
  std::string dir_;
  nlohmann::ordered_json index_;
};

TEST_F(PieceChecks, EveryRankOfAGoodFolderLoadsAndNothingIsUnchecked) {
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(LoadRankShards(dir_, r).ok()) << r;
  EXPECT_EQ(UncheckedPiecesWarning(*ReadShardedCheckpointIndex(dir_)), "");
}

// A changed byte of a sharded piece (rank 1 holds rows 5-9 of embed_tokens): the index's
// hash is the full tensor's, so only the piece hash can tell, and LoadRankShards names the
// file and the tensor. The header check reads no byte; the other ranks are fine.
TEST_F(PieceChecks, FlippedDataByteOfAShardedPiece) {
  FlipByte(1, "model.embed_tokens.weight");
  ExpectLoadError(1,
                  {RankFile(1), "tensor model.embed_tokens.weight", "sdrt.piece_xxh64", "damaged"});
  EXPECT_TRUE(ReadShardedCheckpointIndex(dir_).ok());
  EXPECT_TRUE(LoadRankShards(dir_, 0).ok());
}

// A changed byte of a whole piece (norm.weight has 1 row: rank 2, at tp coordinate 0,
// holds it whole) is named against index.json's hash, as before.
TEST_F(PieceChecks, FlippedDataByteOfAWholePiece) {
  FlipByte(2, "model.norm.weight");
  ExpectLoadError(
      2, {RankFile(2), "tensor model.norm.weight", "holds the whole tensor", "index.json says"});
}

// index.json edited to swap [R, S(0)] for [S(0), R]: embed_tokens' 10 rows split in 5 and 5
// either way, so every local shape still fits; the index hash each rank file recorded does
// not. Both the header check and every rank's load refuse it.
TEST_F(PieceChecks, EditedPlacementWithTheSameLocalShapes) {
  nlohmann::ordered_json j = index_;
  ASSERT_EQ(Entry(j, "model.embed_tokens.weight")["placements"], "[R, S(0)]");
  Entry(j, "model.embed_tokens.weight")["placements"] = "[S(0), R]";
  WriteText(dir_ + "/index.json", j.dump(1));
  ReadShardedCheckpointOptions headers_only;
  headers_only.check_rank_files = false;
  EXPECT_TRUE(ReadShardedCheckpointIndex(dir_, headers_only).ok());
  absl::Status read = ReadShardedCheckpointIndex(dir_).status();
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.message(), AllOf(HasSubstr(RankFile(0)), HasSubstr("written with another index"),
                                    HasSubstr("index.json was edited")));
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    ExpectLoadError(r, {RankFile(r), "sdrt.index_xxh64", dir_ + "/index.json"});
  }
}

// A wrong full-tensor hash in index.json is caught by the rank files, not only by a gather.
TEST_F(PieceChecks, WrongHashInTheIndex) {
  nlohmann::ordered_json j = index_;
  Entry(j, "lm_head.weight")["xxh64"] = "0123456789abcdef";
  WriteText(dir_ + "/index.json", j.dump(1));
  ExpectLoadError(3, {RankFile(3), "written with another index"});
  // Whitespace is no edit: the hash is of the index as sdrt writes it.
  WriteText(dir_ + "/index.json", index_.dump(4));
  EXPECT_TRUE(LoadRankShards(dir_, 3).ok());
}

// A format 2 rank file without its hashes, or with a malformed list, is refused.
TEST_F(PieceChecks, RankFileWithoutItsHashes) {
  std::map<std::string, std::string> meta = SafetensorsFile::Open(RankFile(1))->metadata();
  const std::string pieces = meta.at("sdrt.piece_xxh64");
  meta.erase("sdrt.piece_xxh64");
  RewriteMetadata(RankFile(1), meta);
  ExpectLoadError(1, {RankFile(1), "lacks \"sdrt.piece_xxh64\"", "format 2"});
  meta["sdrt.piece_xxh64"] = pieces.substr(16);
  RewriteMetadata(RankFile(1), meta);
  ExpectLoadError(1, {RankFile(1), "sdrt.piece_xxh64", "16 hex digits for each of the 29 tensors"});
  meta["sdrt.piece_xxh64"] = "Z" + pieces.substr(1);
  RewriteMetadata(RankFile(1), meta);
  ExpectLoadError(1, {RankFile(1), "sdrt.piece_xxh64", "hash 0"});
  meta["sdrt.piece_xxh64"] = pieces;
  meta.erase("sdrt.index_xxh64");
  RewriteMetadata(RankFile(1), meta);
  ExpectLoadError(1, {RankFile(1), "lacks \"sdrt.index_xxh64\""});
}

// A folder written before piece hashes (format 1: index and rank files say 1, the rank
// files lack both keys) is read; the reader says what it cannot check: a changed byte of a
// sharded piece passes, one of a whole piece does not.
TEST_F(PieceChecks, FormatOneIsReadAndSaysWhatItCannotCheck) {
  nlohmann::ordered_json j = index_;
  j["format_version"] = 1;
  WriteText(dir_ + "/index.json", j.dump(1));
  // A format 2 rank file under an index edited to format 1 is refused.
  ExpectLoadError(0, {RankFile(0), "\"sdrt.format_version\" is \"2\" but the index says \"1\""});
  for (int r = 0; r < 4; ++r) {
    std::map<std::string, std::string> meta = SafetensorsFile::Open(RankFile(r))->metadata();
    meta.erase("sdrt.piece_xxh64");
    meta.erase("sdrt.index_xxh64");
    meta["sdrt.format_version"] = "1";
    RewriteMetadata(RankFile(r), meta);
  }
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(dir_);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->format_version, 1);
  EXPECT_THAT(UncheckedPiecesWarning(*index),
              AllOf(HasSubstr(dir_), HasSubstr("format 1"), HasSubstr("no piece hashes"),
                    HasSubstr("not checked")));
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(LoadRankShards(dir_, r).ok()) << r;
  FlipByte(1, "model.embed_tokens.weight");
  EXPECT_TRUE(LoadRankShards(dir_, 1).ok());
  FlipByte(2, "model.norm.weight");
  ExpectLoadError(2, {RankFile(2), "tensor model.norm.weight", "holds the whole tensor"});
}

// WriteShardedRankFile (sdrt reshard's writer) hashes the bytes it writes: a rank file
// written from changed pieces records their hashes, not the source's, so it loads, and
// only the gathered tensor disagrees with the index. An index of format 1 is refused.
TEST_F(PieceChecks, WriteShardedRankFileHashesWhatItWrites) {
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(dir_);
  ASSERT_TRUE(index.ok()) << index.status();
  absl::StatusOr<ShardedCheckpointFolder> folder =
      ShardedCheckpointFolder::Begin(*index, root_ + "/copy", dir_, /*overwrite=*/false);
  ASSERT_TRUE(folder.ok()) << folder.status();
  size_t embed_at = 0;
  while (index->tensors[embed_at].name != "model.embed_tokens.weight") ++embed_at;
  uint64_t changed_hash = 0;
  std::vector<std::pair<std::string, Tensor>> rank0;
  for (int r = 0; r < 4; ++r) {
    absl::StatusOr<RankShards> shards = LoadRankShards(dir_, r);
    ASSERT_TRUE(shards.ok()) << shards.status();
    std::vector<std::pair<std::string, Tensor>> locals;
    for (const auto& [name, d] : shards->tensors) locals.emplace_back(name, *d.local().Clone());
    if (r == 1) {
      Tensor& embed = locals[embed_at].second;
      ASSERT_EQ(locals[embed_at].first, "model.embed_tokens.weight");
      ASSERT_GT(embed.nbytes(), 0);
      static_cast<uint8_t*>(embed.data_ptr())[0] ^= 0x10;
      changed_hash = *TensorXxh64(embed);
    }
    ASSERT_TRUE(WriteShardedRankFile(folder->path(), *index, r, locals).ok());
    if (r == 0) rank0 = locals;
  }
  ASSERT_TRUE(folder->Finish().ok());
  const std::string pieces = SafetensorsFile::Open(root_ + "/copy/" + RankFileName(1, 4))
                                 ->metadata()
                                 .at("sdrt.piece_xxh64");
  EXPECT_EQ(pieces.substr(embed_at * 16, 16), FormatXxh64(changed_hash));
  EXPECT_TRUE(LoadRankShards(root_ + "/copy", 1).ok());

  ShardedCheckpointIndex old = *index;
  old.format_version = 1;
  const absl::Status refused = WriteShardedRankFile(root_, old, 0, rank0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("format_version 1"));
  absl::StatusOr<ShardedCheckpointFolder> old_folder =
      ShardedCheckpointFolder::Begin(old, root_ + "/old", dir_, /*overwrite=*/false);
  EXPECT_EQ(old_folder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(old_folder.status().message(), HasSubstr("format_version 1"));
}

}  // namespace
}  // namespace sdrt
