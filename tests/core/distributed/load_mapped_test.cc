// LoadOptions::map_results (core/distributed/load_options.h, internal/load/mapped_pieces.h)
// in one process: which pieces are one range of their file (one segment of the read plan,
// PlanTensorSegments), which of rank 1's pieces of a 2-rank mesh are mapped and which read
// (Shard(1), a cast, a preallocated local, a tensor at an unaligned offset), the same values
// either way, the stats, a written mapped tensor changing neither the file nor a later
// load, the tensors outliving the source and the file's name, a file cut short or renamed
// over refused without a signal, and the options it does not go with.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/checkpoint/checkpoint_source_test_util.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;
using internal::IndexRun;
using internal::ShardRuns;

// One run per dim, [begin, begin + length).
ShardRuns Box(std::vector<std::pair<int64_t, int64_t>> dims) {
  ShardRuns runs;
  for (const auto& [begin, length] : dims) runs.push_back({IndexRun{begin, 0, length}});
  return runs;
}

// [begin, end) bytes of the piece `runs` from the tensor's first byte when the read plan
// makes it one uncut segment (what map_results maps); nullopt otherwise.
std::optional<std::pair<int64_t, int64_t>> ContiguousPieceBytes(IntSpan shape,
                                                                int64_t element_bytes,
                                                                const ShardRuns& runs) {
  std::vector<internal::Segment> segments;
  const internal::ReadTensor t{0, 0, static_cast<int>(8 * element_bytes), shape, &runs};
  if (!internal::PlanTensorSegments(t, 0, int64_t{1} << 40, segments).ok() ||
      segments.size() != 1) {
    return std::nullopt;
  }
  return std::make_pair(segments[0].file_offset, segments[0].file_offset + segments[0].bytes);
}

TEST(ContiguousPieceBytesTest, WholeTensorsShardZeroAndSingleRowsAreOneRange) {
  using Range = std::optional<std::pair<int64_t, int64_t>>;
  const IntVector shape{4, 6};
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, Box({{0, 4}, {0, 6}})), Range({0, 96}));
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, Box({{2, 2}, {0, 6}})), Range({48, 96}));
  EXPECT_EQ(ContiguousPieceBytes(shape, 2, Box({{1, 1}, {3, 3}})), Range({18, 24}));
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, Box({{0, 4}, {0, 3}})), std::nullopt);  // Shard(1)
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, Box({{0, 2}, {3, 3}})), std::nullopt);
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, Box({{4, 0}, {0, 6}})), std::nullopt);  // empty
  EXPECT_EQ(ContiguousPieceBytes(IntVector{}, 8, ShardRuns{}), Range({0, 8}));      // 0-dim
  EXPECT_EQ(ContiguousPieceBytes(IntVector{2, 3, 4}, 1, Box({{1, 1}, {1, 2}, {0, 4}})),
            Range({16, 24}));
  ShardRuns two = Box({{0, 4}, {0, 6}});
  two[0] = {IndexRun{0, 0, 1}, IndexRun{2, 1, 1}};  // _StridedShard: two runs on dim 0
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, two), std::nullopt);
  EXPECT_EQ(ContiguousPieceBytes(shape, 4, Box({{0, 4}})), std::nullopt);  // wrong rank
}

class LoadMappedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::FreshDir(absl::StrCat(
        "load_mapped_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    tensors_ = {{"rows", test::ValuePattern({5, 4}, DType::kFloat32, 1)},
                {"cols", test::ValuePattern({3, 6}, DType::kFloat32, 2)},
                {"cast", test::ValuePattern({4, 2}, DType::kFloat32, 3)},
                {"kept", test::ValuePattern({6, 2}, DType::kBFloat16, 4)},
                {"plain", test::ValuePattern({3}, DType::kInt64, 5)}};
    test::WriteHfFolder(dir_ + "/hf", tensors_, 2);
    mesh_ = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2"));
  }

  DTensor Meta(int i, const char* placement, DType dtype) const {
    const Tensor& full = tensors_[static_cast<size_t>(i)].second;
    const Placement p = *ParsePlacement(placement);
    const DTensor want = *DistributeTensor(full, mesh_, {p}, 1);
    return *DTensor::Make(*Tensor::Meta(want.local().shape(), dtype), mesh_, {p}, full.shape());
  }

  // Rank 1's state dict: "rows" S(0) (mapped), "cols" S(1) (read), "cast" S(0) in bf16
  // (read: converted), "kept" S(0) preallocated (read in place), "plain" a plain leaf.
  Map Local() const {
    Map local;
    local.Set("rows", Value(Meta(0, "S(0)", DType::kFloat32)));
    local.Set("cols", Value(Meta(1, "S(1)", DType::kFloat32)));
    local.Set("cast", Value(Meta(2, "S(0)", DType::kBFloat16)));
    const DTensor kept = Meta(3, "S(0)", DType::kBFloat16);
    local.Set("kept", Value(*kept.WithLocal(*Tensor::Zeros(kept.local().shape(), kept.dtype()))));
    local.Set("plain", Value(*Tensor::Zeros({3}, DType::kInt64)));
    return local;
  }

  LoadOptions Options(bool map, LoadStats* stats) const {
    LoadOptions options;
    options.rank = 1;
    options.map_results = map;
    options.stats = stats;
    return options;
  }

  std::string dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::shared_ptr<const DeviceMesh> mesh_;
};

TEST_F(LoadMappedTest, ContiguousFreshPiecesAreMappedTheRestRead) {
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok()) << source.status();
  Map read = Local();
  LoadStats read_stats;
  ASSERT_TRUE(LoadStateDict(*source, read, Options(false, &read_stats)).ok());
  Map mapped = Local();
  LoadStats stats;
  ASSERT_TRUE(LoadStateDict(*source, mapped, Options(true, &stats)).ok());
  EXPECT_EQ(Value(mapped), Value(read));
  const auto kind = [&](const char* name) {
    const Value& v = *mapped.Find(name);
    const Tensor& t = v.kind() == ValueKind::kDTensor ? v.as_dtensor().local() : v.as_tensor();
    return t.storage()->kind();
  };
  EXPECT_EQ(kind("rows"), StorageKind::kMappedFile);
  EXPECT_EQ(kind("plain"), StorageKind::kMappedFile);
  EXPECT_NE(kind("cols"), StorageKind::kMappedFile);
  EXPECT_NE(kind("cast"), StorageKind::kMappedFile);
  EXPECT_NE(kind("kept"), StorageKind::kMappedFile);
  const int64_t rows = 2 * 4 * 4;  // rank 1's rows 3..4 of 5
  const int64_t plain = 3 * 8;
  EXPECT_EQ(stats.bytes_mapped, rows + plain);
  EXPECT_EQ(stats.bytes_kept, read_stats.bytes_kept);
  EXPECT_EQ(stats.bytes_read, read_stats.bytes_read - rows - plain);
  EXPECT_EQ(stats.read_amplification(), 1.0);
  EXPECT_GT(stats.preads, 0);  // the rest read
  EXPECT_LT(stats.preads, read_stats.preads);
  EXPECT_EQ(read_stats.bytes_mapped, 0);
}

TEST_F(LoadMappedTest, WritesStayPrivateAndTheTensorsOutliveTheFile) {
  const std::string file = dir_ + "/hf/" + test::HfShardName(0, 2);
  Map mapped = Local();
  {
    const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
    ASSERT_TRUE(source.ok());
    ASSERT_TRUE(LoadStateDict(*source, mapped, Options(true, nullptr)).ok());
  }
  const Tensor rows = mapped.Find("rows")->as_dtensor().local();
  const Tensor want = DistributeTensor(tensors_[0].second, mesh_, {Placement::Shard(0)}, 1)
                          ->local();
  ASSERT_EQ(*TensorXxh64(rows), *TensorXxh64(want));
  rows.data<float>()[0] = 12345.0f;  // a private copy of that page: the file is unchanged
  const absl::StatusOr<CheckpointSource> again = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(again.ok());
  Map reread = Local();
  ASSERT_TRUE(LoadStateDict(*again, reread, Options(true, nullptr)).ok());
  EXPECT_EQ(*TensorXxh64(reread.Find("rows")->as_dtensor().local()), *TensorXxh64(want));
  // The mapping keeps the file's bytes when its name is gone.
  ASSERT_EQ(unlink(file.c_str()), 0);
  EXPECT_EQ(rows.data<float>()[0], 12345.0f);
  EXPECT_EQ(rows.data<float>()[1], want.data<float>()[1]);
}

TEST_F(LoadMappedTest, AFileCutShortIsAnErrorNotASignal) {
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok());
  const std::string file = dir_ + "/hf/" + test::HfShardName(0, 2);
  ASSERT_EQ(truncate(file.c_str(), 64), 0);
  Map local = Local();
  const absl::Status s = LoadStateDict(*source, local, Options(true, nullptr)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("size changed from"));
}

TEST_F(LoadMappedTest, AFileRenamedOverSinceTheOpenIsRefusedReadOrMapped) {
  // Another file of the same size (its bytes and tensor order could differ) renamed over
  // the opened one: reading it at the opened header's offsets would mix up the tensors.
  const std::string file = dir_ + "/hf/" + test::HfShardName(0, 2);
  for (const bool map : {false, true}) {
    SCOPED_TRACE(map ? "mapped" : "read");
    const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
    ASSERT_TRUE(source.ok());
    const std::string copy = file + ".copy";
    ASSERT_TRUE(std::filesystem::copy_file(file, copy));
    ASSERT_EQ(rename(copy.c_str(), file.c_str()), 0);
    Map local = Local();
    const absl::Status s = LoadStateDict(*source, local, Options(map, nullptr)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(s.message(), HasSubstr(file + ": replaced since it was opened"));
    // Opened again, the same bytes load.
    const absl::StatusOr<CheckpointSource> again = CheckpointSource::Open(dir_ + "/hf");
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(LoadStateDict(*again, local, Options(map, nullptr)).ok());
  }
}

TEST_F(LoadMappedTest, AnUnalignedTensorIsRead) {
  // "b" (bf16) sits at an odd byte of the file with one header length, at an even one with
  // the other (case-045's file): mapped only where its address would be aligned.
  const std::string path = dir_ + "/unaligned.safetensors";
  const std::string json =
      R"({"o":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"BF16","shape":[2],)"
      R"("data_offsets":[1,5]},"x":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})";
  for (int pad = 0; pad < 2; ++pad) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << test::Image(json + std::string(pad, ' '), std::string("\x07\x80\x3f\x00\xc0\x09", 6));
    const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path);
    ASSERT_TRUE(source.ok());
    const bool aligned = (source->file(0).data_offset() + 1) % 2 == 0;
    Map local;
    local.Set("b", Value(*Tensor::Zeros({2}, DType::kBFloat16)));
    LoadStats stats;
    LoadOptions options = Options(true, &stats);
    ASSERT_TRUE(LoadStateDict(*source, local, options).ok());
    const Tensor& b = local.Find("b")->as_tensor();
    EXPECT_EQ(b.data<uint16_t>()[0], 0x3f80);
    EXPECT_EQ(b.data<uint16_t>()[1], 0xc000);
    EXPECT_EQ(b.storage()->kind() == StorageKind::kMappedFile, aligned) << "pad " << pad;
    EXPECT_EQ(stats.bytes_mapped, aligned ? 4 : 0);
    // Said when it was read: the pieces mapped are 0 B, and why.
    EXPECT_EQ(absl::StrContains(stats.read_reason,
                                "map_results: pieces read instead (1 piece(s) at a file offset "
                                "not aligned for their dtype, the first of 'b')"),
              !aligned)
        << stats.read_reason;
  }
}

TEST_F(LoadMappedTest, NotWithDirectIoOrSharedReads) {
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir_ + "/hf");
  ASSERT_TRUE(source.ok());
  for (const bool direct : {true, false}) {
    Map local = Local();
    LoadOptions options = Options(true, nullptr);
    options.direct_io = direct;
    options.share_reads = !direct;
    const absl::Status s = LoadStateDict(*source, local, options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("map_results goes with neither"));
  }
}

}  // namespace
}  // namespace sdrt
