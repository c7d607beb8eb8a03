// WriteHfCheckpoint and its parts (core/checkpoint/hf_checkpoint_writer.h): the size parser,
// huggingface_hub's split, what an existing folder may be, and folders read back through
// CheckpointSource bit-exact; the golden folder huggingface_hub wrote (tests/data/hf,
// tests/golden/make_hf_golden.py) read bit-exact and its tensors split as huggingface_hub
// splits them.
#include "sdrt/core/checkpoint/hf_checkpoint_writer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/golden_codec.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Named = std::vector<std::pair<std::string, Tensor>>;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<HfShardPlan> Write(const std::string& dir, const Named& tensors, int64_t max_bytes,
                                  bool overwrite = false) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype(), t.shape()});
  WriteHfCheckpointOptions options;
  options.max_shard_bytes = max_bytes;
  options.overwrite = overwrite;
  const auto source = [&](size_t i) -> absl::StatusOr<Tensor> { return tensors[i].second; };
  return WriteHfCheckpoint(dir, specs, source, {{"who", "test"}}, options);
}

// `dir` read through CheckpointSource holds exactly `tensors`, in their order, bit-exact.
void ExpectReadsBack(const std::string& dir, const Named& tensors) {
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(dir);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"who", "test"}}));
  ASSERT_EQ(source->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CheckpointSourceTensor& t = source->tensors()[i];
    EXPECT_EQ(t.name, tensors[i].first);
    absl::StatusOr<Tensor> got = source->Get(t.name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->dtype(), tensors[i].second.dtype()) << t.name;
    EXPECT_EQ(got->shape(), tensors[i].second.shape()) << t.name;
    EXPECT_EQ(Bytes(*got), Bytes(tensors[i].second)) << t.name;
  }
}

// `tensors` in the order `plan` writes them: file by file, each file's in the given order.
Named InFileOrder(const Named& tensors, const HfShardPlan& plan) {
  Named out;
  for (const std::vector<size_t>& members : plan.file_tensors) {
    for (size_t i : members) out.push_back(tensors[i]);
  }
  return out;
}

TEST(ParseMaxShardSize, UnitsAsHuggingFaceReadsThem) {
  const std::vector<std::pair<std::string, int64_t>> good = {
      {"500MB", 500'000'000},
      {"2GiB", int64_t{2} << 30},
      {"5GB", 5'000'000'000},
      {"123", 123},
      {"1.5GB", 1'500'000'000},
      {" 4 kb ", 4000},
      {"10B", 10},
      {"1TiB", int64_t{1} << 40},
      {"0.5KiB", 512},
      {"3TB", 3'000'000'000'000},
      {"1.0009KB", 1000},
      {"9223372036854775807", INT64_MAX},
      {"8388607TiB", int64_t{8388607} << 40}};
  for (const auto& [text, bytes] : good) {
    absl::StatusOr<int64_t> parsed = ParseMaxShardSize(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes) << text;
  }
  for (const std::string text :
       {"", "abc", "5XB", "-5GB", "+5GB", "0", "0MB", "1.5", "1e9", "9223372036854775808",
        "8388608TiB", "99999999999999TB", "5 G B", "0.0001KB", "GB", ".", "5GB5"}) {
    absl::StatusOr<int64_t> parsed = ParseMaxShardSize(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr("shard size")) << text;
  }
}

// huggingface_hub's rule: a tensor over the limit alone at once, the current file keeps
// filling; a file is closed when the next tensor would take it over the limit.
TEST(PlanHfShards, HuggingFaceSplit) {
  absl::StatusOr<HfShardPlan> plan = PlanHfShards({2, 10, 3}, 5);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->files,
              ElementsAre("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"));
  EXPECT_THAT(plan->file_tensors, ElementsAre(ElementsAre(1), ElementsAre(0, 2)));
  EXPECT_EQ(plan->total_size, 15);
  // Exactly the limit fits; 6 is alone as soon as it comes. What huggingface_hub 2.4.0's
  // split_state_dict_into_shards_factory gives for these sizes (run by hand).
  plan = PlanHfShards({3, 2, 0, 3, 5, 6, 0}, 5);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->file_tensors,
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3), ElementsAre(5), ElementsAre(4, 6)));
  EXPECT_EQ(plan->files[3], "model-00004-of-00004.safetensors");
  plan = PlanHfShards({1, 2, 3}, 6);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->files, ElementsAre("model.safetensors"));
  EXPECT_FALSE(plan->sharded());
  plan = PlanHfShards({}, 6);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->file_tensors, ElementsAre(ElementsAre()));
  EXPECT_EQ(PlanHfShards({1}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanHfShards({-1}, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanHfShards({INT64_MAX, 1}, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

class HfCheckpointWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(absl::StrCat(
        "hf_writer_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    tensors_ = test::MixedStateDict();
    out_ = root_ + "/out";
  }
  std::string root_;
  Named tensors_;
  std::string out_;
};

TEST_F(HfCheckpointWriter, ShardedFolderReadsBackBitExact) {
  absl::StatusOr<HfShardPlan> plan = Write(out_ + "/", tensors_, 200);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->files.size(), 2u);
  std::vector<std::string> want = plan->files;
  want.emplace_back(kHfIndexFileName);
  EXPECT_EQ(ListDir(out_), want);
  EXPECT_EQ(ListDir(root_), std::vector<std::string>{"out"});  // no temporary left
  const nlohmann::ordered_json index =
      nlohmann::ordered_json::parse(ReadText(out_ + "/" + std::string(kHfIndexFileName)));
  EXPECT_EQ(index["metadata"]["total_size"], plan->total_size);
  size_t mapped = 0;
  for (size_t f = 0; f < plan->files.size(); ++f) {
    for (size_t i : plan->file_tensors[f]) {
      EXPECT_EQ(index["weight_map"][tensors_[i].first], plan->files[f]);
      ++mapped;
    }
  }
  EXPECT_EQ(mapped, tensors_.size());
  EXPECT_EQ(index["weight_map"].size(), tensors_.size());
  for (const std::string& f : plan->files) {
    int64_t bytes = 0;
    const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out_ + "/" + f);
    ASSERT_TRUE(file.ok()) << file.status();
    for (const SafetensorsEntry& e : file->entries()) bytes += e.data_end - e.data_begin;
    EXPECT_TRUE(bytes <= 200 || file->entries().size() == 1) << f << ": " << bytes;
  }
  ExpectReadsBack(out_, InFileOrder(tensors_, *plan));
}

TEST_F(HfCheckpointWriter, OneFileHasNoIndex) {
  absl::StatusOr<HfShardPlan> plan = Write(out_, tensors_, kHfDefaultMaxShardBytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(ListDir(out_), std::vector<std::string>{"model.safetensors"});
  ExpectReadsBack(out_, tensors_);
  // An empty folder is written into without overwrite.
  fs::remove_all(out_);
  fs::create_directories(out_);
  plan = Write(out_, tensors_, 300);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectReadsBack(out_ + "/", InFileOrder(tensors_, *plan));
}

// An existing folder is replaced only with overwrite and only when it is exactly what this
// writer makes; never a folder of the user's, which is left as it was.
TEST_F(HfCheckpointWriter, ReplacesOnlyItsOwnFolders) {
  ASSERT_TRUE(Write(out_, tensors_, 200).ok());
  absl::StatusOr<HfShardPlan> again = Write(out_, tensors_, 300);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("--overwrite"));
  again = Write(out_, tensors_, 300, /*overwrite=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(out_);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->files().size(), again->files.size());
  ASSERT_TRUE(Write(out_, tensors_, kHfDefaultMaxShardBytes, true).ok());  // one file replaces it
  EXPECT_EQ(ListDir(out_), std::vector<std::string>{"model.safetensors"});
  const absl::StatusOr<HfShardPlan> plan = Write(out_, tensors_, 200, true);  // and back
  ASSERT_TRUE(plan.ok()) << plan.status();

  const auto expect_refused = [&](const std::string& why) {
    SCOPED_TRACE(why);
    const std::vector<std::string> before = ListDir(out_);
    const absl::Status s = CheckHfCheckpointTarget(out_, true);
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
    EXPECT_THAT(s.message(), HasSubstr("refusing to replace it"));
    EXPECT_THAT(s.message(), HasSubstr(why));
    EXPECT_EQ(Write(out_, tensors_, 200, true).status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(ListDir(out_), before);
  };
  std::ofstream(out_ + "/notes.txt") << "mine";
  expect_refused("notes.txt");
  fs::remove(out_ + "/notes.txt");
  fs::create_directories(out_ + "/sub");
  expect_refused("\"sub\", not a regular file");
  fs::remove(out_ + "/sub");
  fs::rename(out_ + "/" + plan->files[0], root_ + "/moved");
  expect_refused("is missing");
  fs::rename(root_ + "/moved", out_ + "/" + plan->files[0]);
  // A user's folder with one safetensors file of another name, or a single file that is
  // not safetensors.
  const std::string user = root_ + "/user";
  fs::create_directories(user);
  ASSERT_TRUE(WriteSafetensors(user + "/weights.safetensors", tensors_).ok());
  EXPECT_EQ(CheckHfCheckpointTarget(user, true).code(), absl::StatusCode::kAlreadyExists);
  fs::remove(user + "/weights.safetensors");
  std::ofstream(user + "/model.safetensors") << "not safetensors";
  EXPECT_EQ(CheckHfCheckpointTarget(user, true).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadText(user + "/model.safetensors"), "not safetensors");
  // A file where the folder would go.
  EXPECT_THAT(CheckHfCheckpointTarget(user + "/model.safetensors", true).message(),
              HasSubstr("not a folder"));
  ExpectReadsBack(out_, InFileOrder(tensors_, *plan));  // what was refused is untouched
}

TEST_F(HfCheckpointWriter, RefusesWhatAReaderWouldRefuse) {
  const Tensor& t = tensors_[0].second;
  for (const Named& bad : {Named{{"", t}, {"b", t}}, Named{{"a", t}, {"b", t}, {"a", t}},
                           Named{{"a", t}, {"__metadata__", t}}, Named{{"a", t}, {"\xff", t}}}) {
    SCOPED_TRACE(bad[1].first);
    const absl::StatusOr<HfShardPlan> plan = Write(out_, bad, 1);  // one file per tensor
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
    EXPECT_FALSE(fs::exists(out_));
    EXPECT_TRUE(ListDir(root_).empty());  // nothing was created
  }
  // A missing parent folder.
  EXPECT_EQ(Write(root_ + "/no/out", tensors_, 200).status().code(), absl::StatusCode::kNotFound);
}

// The folder huggingface_hub's save_torch_state_dict wrote: every tensor read bit-exact
// (the xxh64 Python computed), in the order the script says sdrt reads it; written again
// from that order with the same limit, the split and the index are huggingface_hub's own
// for the same order, byte for byte.
TEST(HfGolden, ReadBitExactAndSplitAsHuggingFaceHub) {
  absl::StatusOr<nlohmann::json> expected = testing_golden::ReadGoldenJson("hf/expected.json");
  ASSERT_TRUE(expected.ok()) << expected.status();
  const std::string golden = std::string(SDRT_TEST_DATA_DIR) + "/hf/golden";
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(golden);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->kind(), CheckpointKind::kHfFolder);
  EXPECT_EQ(source->total_bytes(), (*expected)["total_size"].get<int64_t>());
  std::vector<std::string> files, order;
  for (const CheckpointSourceFile& f : source->files()) files.push_back(f.name);
  EXPECT_EQ(files, (*expected)["golden_files"].get<std::vector<std::string>>());
  for (const CheckpointSourceTensor& t : source->tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (*expected)["sdrt_order"].get<std::vector<std::string>>());
  for (const nlohmann::json& want : (*expected)["tensors"]) {
    const std::string name = want["name"];
    SCOPED_TRACE(name);
    const CheckpointSourceTensor* t = source->Find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(SafetensorsCode(t->dtype), want["dtype"].get<std::string>());
    EXPECT_EQ(t->shape, want["shape"].get<IntVector>());
    absl::StatusOr<Tensor> tensor = source->Get(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(FormatXxh64(*TensorXxh64(*tensor)), want["xxh64"].get<std::string>());
  }

  Named in_order;
  for (const std::string& name : order) in_order.emplace_back(name, *source->Get(name));
  const std::string out = test::FreshDir("hf_writer_golden") + "/out";
  absl::StatusOr<int64_t> limit =
      ParseMaxShardSize((*expected)["max_shard_size"].get<std::string>());
  ASSERT_TRUE(limit.ok()) << limit.status();
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& [name, t] : in_order) specs.push_back({name, t.dtype(), t.shape()});
  WriteHfCheckpointOptions options;
  options.max_shard_bytes = *limit;
  absl::StatusOr<HfShardPlan> plan = WriteHfCheckpoint(
      out, specs, [&](size_t i) -> absl::StatusOr<Tensor> { return in_order[i].second; },
      source->metadata(), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const nlohmann::json& gathered = (*expected)["gathered"];
  EXPECT_EQ(plan->files, gathered["files"].get<std::vector<std::string>>());
  for (size_t f = 0; f < plan->files.size(); ++f) {
    std::vector<std::string> names;
    for (size_t i : plan->file_tensors[f]) names.push_back(in_order[i].first);
    EXPECT_EQ(names, gathered["file_tensors"][plan->files[f]].get<std::vector<std::string>>());
  }
  EXPECT_EQ(ReadText(out + "/" + std::string(kHfIndexFileName)),
            gathered["index"].get<std::string>());
}

}  // namespace
}  // namespace sdrt
