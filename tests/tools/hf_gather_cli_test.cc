// `mpiexec -n N sdrt gather INDIR OUT/` writing a Hugging Face folder (issue 13 section 3),
// run as the built binary under mpiexec for 2 and 3 ranks: the split of --max-shard-size (a
// tensor over the limit alone in its file), the index, every tensor read back bit-exact
// through sdrt's own Hugging Face reader, the one-file case, --max-shard-size errors, which
// existing folders are replaced, outputs never inside or over an input, and the golden
// folder huggingface_hub wrote (tests/data/hf) gathered into exactly the folder
// huggingface_hub writes for the same tensors.
#include <algorithm>
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
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

std::string Quote(const std::string& s) { return test::ShellQuote(s); }

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand("timeout 120 " + Quote(SDRT_BINARY) + " " + args);
}

CommandResult Mpi(int ranks, const std::string& args) {
  return test::RunCommand(absl::StrCat("timeout 300 ", Quote(SDRT_MPIEXEC), " ",
                                       SDRT_MPIEXEC_NUMPROC_FLAG, " ", ranks, " ",
                                       Quote(SDRT_BINARY), " ", args));
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Every path under `root` with its bytes: equal before and after means nothing was touched.
std::vector<std::string> Snapshot(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    out.push_back(e.is_symlink()     ? rel + " -> " + fs::read_symlink(e.path()).string()
                  : e.is_directory() ? rel + " <dir>"
                                     : rel + " " + ReadText(e.path().string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Exit code 2, nothing on stdout, one line on stderr naming each of `parts`.
void ExpectBadInput(const CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& p : parts) EXPECT_THAT(r.err, HasSubstr(p));
}

// `dir`, read by CheckpointSource, holds exactly the tensors of the file `source`,
// bit-exact, with its __metadata__.
void ExpectSameTensors(const std::string& source, const std::string& dir) {
  absl::StatusOr<CheckpointSource> a = CheckpointSource::Open(source);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<CheckpointSource> b = CheckpointSource::Open(dir);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->metadata(), a->metadata());
  ASSERT_EQ(b->tensors().size(), a->tensors().size());
  for (const CheckpointSourceTensor& t : a->tensors()) {
    SCOPED_TRACE(t.name);
    absl::StatusOr<Tensor> x = a->Get(t.name);
    absl::StatusOr<Tensor> y = b->Get(t.name);
    ASSERT_TRUE(x.ok() && y.ok()) << x.status() << y.status();
    EXPECT_EQ(y->dtype(), x->dtype());
    EXPECT_EQ(y->shape(), x->shape());
    EXPECT_EQ(*TensorXxh64(*y), *TensorXxh64(*x));
  }
}

// The tensor names of each file of `dir`, in the order of their bytes.
std::vector<std::vector<std::string>> FileTensors(const std::string& dir,
                                                  const std::vector<std::string>& files) {
  std::vector<std::vector<std::string>> out;
  for (const std::string& f : files) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(dir + "/" + f);
    EXPECT_TRUE(file.ok()) << file.status();
    out.emplace_back();
    if (!file.ok()) continue;
    for (const SafetensorsEntry& e : file->entries()) out.back().push_back(e.name);
  }
  return out;
}

class HfGather : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ranks_ = GetParam();
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    root_ = test::FreshDir("hf_gather_" + name);
    // Bytes 400, 300, 1200, 400, 200, 0, 8 in this order (data in the given order): with a
    // limit of 1000, c is alone at once and a, b wait for d: [c], [a, b], [d, e, f, g].
    const std::vector<std::pair<std::string, Tensor>> tensors = {
        {"a", test::HashBytes({100}, DType::kFloat32, 1)},
        {"b", test::HashBytes({10, 15}, DType::kBFloat16, 2)},
        {"c", test::HashBytes({30, 10}, DType::kFloat32, 3)},
        {"d", test::HashBytes({50}, DType::kInt64, 4)},
        {"e", test::HashBytes({4, 50}, DType::kUInt8, 5)},
        {"f", test::HashBytes({0}, DType::kFloat32, 6)},
        {"g", test::HashBytes({}, DType::kInt64, 7)}};
    source_ = root_ + "/source.safetensors";
    WriteSafetensorsOptions options;
    options.data_in_given_order = true;
    ASSERT_TRUE(
        WriteSafetensors(source_, tensors, {{"format", "pt"}, {"who", "test"}}, options).ok());
    ckpt_ = root_ + "/ckpt";
    const CommandResult r = Sdrt(absl::StrCat("shard ", Quote(source_), " ", Quote(ckpt_),
                                              " --mesh ", ranks_, " --plan fsdp"));
    ASSERT_EQ(r.exit_code, 0) << r.all();
  }

  CommandResult Gather(const std::string& out, const std::string& flags = "") {
    return Mpi(ranks_, absl::StrCat("gather ", Quote(ckpt_), " ", Quote(out), flags));
  }

  int ranks_ = 0;
  std::string root_, source_, ckpt_;
};

TEST_P(HfGather, SplitsByMaxShardSize) {
  const std::string out = root_ + "/out";
  const CommandResult r = Gather(out + "/", " --max-shard-size 1000");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const std::vector<std::string> files = {"model-00001-of-00003.safetensors",
                                          "model-00002-of-00003.safetensors",
                                          "model-00003-of-00003.safetensors"};
  EXPECT_THAT(r.out, AllOf(HasSubstr(absl::StrCat("gathered 7 tensors (2.51 kB) from ", ranks_,
                                                  " ranks into ", out, "/")),
                           HasSubstr("  Hugging Face folder: 3 files of at most 1,000 bytes of "
                                     "tensors (model-00001-of-00003.safetensors ... "
                                     "model-00003-of-00003.safetensors) and "
                                     "model.safetensors.index.json; 1 tensor larger than that "
                                     "alone in a file\n")));
  std::vector<std::string> want = files;
  want.emplace_back("model.safetensors.index.json");
  EXPECT_EQ(ListDir(out), want);
  EXPECT_EQ(ListDir(root_), (std::vector<std::string>{"ckpt", "out", "source.safetensors"}));
  EXPECT_EQ(FileTensors(out, files),
            (std::vector<std::vector<std::string>>{{"c"}, {"a", "b"}, {"d", "e", "f", "g"}}));
  const Json index = Json::parse(ReadText(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index, Json::parse(R"({"metadata": {"total_size": 2508}, "weight_map": {
      "c": "model-00001-of-00003.safetensors", "a": "model-00002-of-00003.safetensors",
      "b": "model-00002-of-00003.safetensors", "d": "model-00003-of-00003.safetensors",
      "e": "model-00003-of-00003.safetensors", "f": "model-00003-of-00003.safetensors",
      "g": "model-00003-of-00003.safetensors"}})"));
  ExpectSameTensors(source_, out);

  // --json says the same; --overwrite with decimal units gives the same split.
  const CommandResult j = Gather(out, " --max-shard-size 1KB --overwrite --json");
  ASSERT_EQ(j.exit_code, 0) << j.all();
  const Json parsed = Json::parse(j.out);
  EXPECT_EQ(parsed["layout"], "huggingface");
  EXPECT_EQ(parsed["max_shard_bytes"], 1000);
  EXPECT_EQ(parsed["files"], Json(files));
  EXPECT_EQ(ListDir(out), want);
}

TEST_P(HfGather, OneFileIsModelSafetensorsWithoutIndex) {
  const std::string out = root_ + "/out";
  fs::create_directories(out);  // an existing empty folder: no trailing slash needed
  const CommandResult r = Gather(out);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("  Hugging Face folder: model.safetensors alone (everything fits "
                               "in 5,000,000,000 bytes: no index)\n"));
  EXPECT_EQ(ListDir(out), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(FileTensors(out, {"model.safetensors"}),
            (std::vector<std::vector<std::string>>{{"a", "b", "c", "d", "e", "f", "g"}}));
  ExpectSameTensors(source_, out);
}

TEST_P(HfGather, MaxShardSizeErrorsExit2) {
  for (const std::string bad : {"0", "abc", "-5GB", "99999999999TB", "1.5", "5XB"}) {
    SCOPED_TRACE(bad);
    ExpectBadInput(Gather(root_ + "/out/", " --max-shard-size " + Quote(bad)),
                   {"--max-shard-size", "shard size"});
    EXPECT_FALSE(fs::exists(root_ + "/out"));
  }
  ExpectBadInput(Gather(root_ + "/out.safetensors", " --max-shard-size 1MB"),
                 {"--max-shard-size", "out.safetensors is a file"});
  EXPECT_EQ(ListDir(root_), (std::vector<std::string>{"ckpt", "source.safetensors"}));
}

// An existing folder is replaced only with --overwrite and only when it is a Hugging Face
// folder sdrt could have written; a folder of the user's never, and it is left untouched.
TEST_P(HfGather, ExistingFolders) {
  const std::string out = root_ + "/out";
  ASSERT_EQ(Gather(out + "/", " --max-shard-size 1000").exit_code, 0);
  std::vector<std::string> before = Snapshot(out);
  ExpectBadInput(Gather(out), {out, "--overwrite"});
  EXPECT_EQ(Snapshot(out), before);
  const CommandResult r = Gather(out, " --overwrite");  // now one file
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(ListDir(out), std::vector<std::string>{"model.safetensors"});

  std::ofstream(out + "/notes.txt") << "mine";
  before = Snapshot(out);
  ExpectBadInput(Gather(out, " --overwrite"), {out, "notes.txt", "refusing to replace it"});
  EXPECT_EQ(Snapshot(out), before);
  const std::string user = root_ + "/user";
  fs::create_directories(user + "/sub");
  std::ofstream(user + "/weights.safetensors") << "mine";
  before = Snapshot(user);
  ExpectBadInput(Gather(user, " --overwrite"), {user, "refusing to replace it"});
  EXPECT_EQ(Snapshot(user), before);
}

// OUT is never INDIR, inside it, above it, a link, or a folder holding a file of it.
TEST_P(HfGather, OutputNeverOverAnInput) {
  const std::vector<std::string> before = Snapshot(ckpt_);
  ExpectBadInput(Gather(ckpt_ + "/", " --overwrite"), {ckpt_});
  ExpectBadInput(Gather(ckpt_ + "/sub/"), {"is inside", ckpt_});
  ExpectBadInput(Gather(root_, " --overwrite"), {"contains", ckpt_});
  fs::create_directories(root_ + "/empty");
  fs::create_symlink(root_ + "/empty", root_ + "/link");
  ExpectBadInput(Gather(root_ + "/link/"), {"symbolic link"});
  // A one-file folder whose model.safetensors is a rank file of INDIR (a hard link): the
  // same file by identity, though it passes for a folder sdrt wrote.
  const std::string linked = root_ + "/linked";
  fs::create_directories(linked);
  fs::create_hard_link(ckpt_ + "/" + RankFileName(0, ranks_), linked + "/model.safetensors");
  ExpectBadInput(Gather(linked, " --overwrite"), {"model.safetensors", "the same file"});
  EXPECT_EQ(Snapshot(ckpt_), before);
}

// The folder huggingface_hub wrote, sharded and gathered back with its max_shard_size: the
// files, each file's tensors and the index byte for byte are what huggingface_hub writes
// for the same tensors in the same order (tests/golden/make_hf_golden.py), every tensor
// the xxh64 Python computed.
TEST_P(HfGather, GoldenFolderGathersAsHuggingFaceHubWrites) {
  absl::StatusOr<nlohmann::json> expected = testing_golden::ReadGoldenJson("hf/expected.json");
  ASSERT_TRUE(expected.ok()) << expected.status();
  const std::string golden = std::string(SDRT_TEST_DATA_DIR) + "/hf/golden";
  const CommandResult inspect = Sdrt("inspect --json " + Quote(golden));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.all();
  EXPECT_EQ(Json::parse(inspect.out)["kind"], "huggingface");
  const std::string ckpt = root_ + "/golden_ckpt";
  ASSERT_EQ(Sdrt(absl::StrCat("shard ", Quote(golden), " ", Quote(ckpt), " --mesh ", ranks_,
                              " --plan fsdp"))
                .exit_code,
            0);
  const std::string out = root_ + "/golden_out/";
  const CommandResult r =
      Mpi(ranks_, absl::StrCat("gather ", Quote(ckpt), " ", Quote(out), " --max-shard-size ",
                               (*expected)["max_shard_size"].get<std::string>()));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json& gathered = (*expected)["gathered"];
  const std::vector<std::string> files = gathered["files"].get<std::vector<std::string>>();
  std::vector<std::string> want = files;
  want.emplace_back("model.safetensors.index.json");
  EXPECT_EQ(ListDir(out), want);
  const std::vector<std::vector<std::string>> per_file = FileTensors(out, files);
  for (size_t f = 0; f < files.size(); ++f) {
    EXPECT_EQ(per_file[f], gathered["file_tensors"][files[f]].get<std::vector<std::string>>());
  }
  EXPECT_EQ(ReadText(out + "model.safetensors.index.json"), gathered["index"].get<std::string>());
  absl::StatusOr<CheckpointSource> back = CheckpointSource::Open(out);
  ASSERT_TRUE(back.ok()) << back.status();
  for (const nlohmann::json& t : (*expected)["tensors"]) {
    absl::StatusOr<Tensor> tensor = back->Get(t["name"].get<std::string>());
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(FormatXxh64(*TensorXxh64(*tensor)), t["xxh64"].get<std::string>()) << t["name"];
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, HfGather, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("np", info.param);
                         });

}  // namespace
}  // namespace sdrt
