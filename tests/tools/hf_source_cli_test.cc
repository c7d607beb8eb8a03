// `sdrt inspect` and `sdrt shard` on Hugging Face folders and folders of safetensors files
// (core/checkpoint/checkpoint_source.h), run as the built binary: the listing and the
// sharded checkpoint equal the single file's, and every case-054 folder is refused with
// exit code 2 and one line naming the folder, the file and the tensor.
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
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/checkpoint_source_test_util.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;
using test::CommandResult;
using test::HfShardName;
using test::ShellQuote;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand("timeout 60 " + std::string(SDRT_BINARY) + " " + args);
}

// Exit code 2, nothing on stdout, one line on stderr naming each of `parts`.
void ExpectBadInput(const CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  for (const std::string& p : parts) EXPECT_THAT(r.err, HasSubstr(p));
}

Json ParseOut(const CommandResult& r) {
  Json parsed = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << r.all();
  return parsed;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HfSourceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(absl::StrCat(
        "hf_source_cli_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    tensors_ = test::MixedStateDict();
    single_ = root_ + "/single.safetensors";
    ASSERT_TRUE(WriteSafetensors(single_, tensors_, {{"format", "pt"}}).ok());
    hf_ = root_ + "/hf";
    test::WriteHfFolder(hf_, tensors_, 3);
  }

  std::string root_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::string single_;
  std::string hf_;
};

// inspect of a 3-file folder: the single file's tensors, dtypes, shapes and byte counts, the
// file of each tensor, the file count; the table names each file.
TEST_F(HfSourceCli, Case054InspectHfFolderMatchesSingleFile) {
  const CommandResult one = Sdrt("inspect --json " + ShellQuote(single_));
  ASSERT_EQ(one.exit_code, 0) << one.all();
  const CommandResult hf = Sdrt("inspect --json " + ShellQuote(hf_));
  ASSERT_EQ(hf.exit_code, 0) << hf.all();
  const Json a = ParseOut(one);
  const Json b = ParseOut(hf);
  EXPECT_EQ(b["kind"], "huggingface");
  EXPECT_EQ(b["file_count"], 3);
  EXPECT_EQ(b["tensors"], a["tensors"]);
  EXPECT_EQ(b["parameters"], a["parameters"]);
  EXPECT_EQ(b["bytes"], a["bytes"]);
  EXPECT_EQ(b["metadata"], a["metadata"]);
  EXPECT_EQ(b["index_metadata"]["total_size"], std::to_string(a["bytes"].get<int64_t>()));
  ASSERT_EQ(b["files"].size(), 3u);
  const Json index = test::ReadHfIndex(hf_);
  std::map<std::string, Json> want;
  for (const Json& e : a["entries"]) want[e["name"]] = e;
  ASSERT_EQ(b["entries"].size(), want.size());
  for (const Json& e : b["entries"]) {
    const std::string name = e["name"];
    SCOPED_TRACE(name);
    ASSERT_EQ(want.count(name), 1u);
    EXPECT_EQ(e["dtype"], want[name]["dtype"]);
    EXPECT_EQ(e["shape"], want[name]["shape"]);
    EXPECT_EQ(e["nbytes"], want[name]["nbytes"]);
    EXPECT_EQ(e["file"], index["weight_map"][name]);
    // The offset is where the tensor's bytes are in its file.
    const std::string bytes = ReadText(hf_ + "/" + e["file"].get<std::string>())
                                  .substr(e["offset"].get<size_t>(), e["nbytes"].get<size_t>());
    const std::string file_bytes = ReadText(single_);
    const size_t data = file_bytes.size() - a["bytes"].get<size_t>();  // data region start
    const int64_t begin = want[name]["data_offsets"][0];
    EXPECT_EQ(bytes, file_bytes.substr(data + static_cast<size_t>(begin), bytes.size()));
  }

  const CommandResult table = Sdrt("inspect " + ShellQuote(hf_));
  ASSERT_EQ(table.exit_code, 0) << table.all();
  EXPECT_THAT(table.out, HasSubstr("Hugging Face checkpoint folder"));
  EXPECT_THAT(table.out, HasSubstr("3 files"));
  EXPECT_THAT(table.out, HasSubstr(absl::StrCat(tensors_.size(), " tensors, ")));
  EXPECT_THAT(table.out, HasSubstr("of data in 3 files"));
  for (int i = 0; i < 3; ++i) EXPECT_THAT(table.out, HasSubstr(HfShardName(i, 3)));
  EXPECT_THAT(table.out, HasSubstr("total_size = "));
  EXPECT_THAT(table.out, HasSubstr("format = pt"));
}

// The four case-054 folders, each exit 2 naming the folder, the file and the tensor.
TEST_F(HfSourceCli, Case054InspectRefusesBadFolders) {
  const std::string w = tensors_[0].first;  // in file 1
  const std::string f1 = HfShardName(0, 3);
  const std::string f2 = HfShardName(1, 3);
  const Json good = test::ReadHfIndex(hf_);

  // 1. The index maps w to file 1, but w is in file 1 and file 2.
  {
    absl::StatusOr<SafetensorsFile> second = SafetensorsFile::Open(hf_ + "/" + f2);
    ASSERT_TRUE(second.ok());
    std::vector<std::pair<std::string, Tensor>> with_w;
    for (const SafetensorsEntry& e : second->entries())
      with_w.emplace_back(e.name, *second->Get(e.name));
    with_w.push_back(tensors_[0]);
    ASSERT_TRUE(WriteSafetensors(root_ + "/f2.tmp", with_w, {{"format", "pt"}}).ok());
    fs::rename(root_ + "/f2.tmp", hf_ + "/" + f2);
    ExpectBadInput(Sdrt("inspect " + ShellQuote(hf_)), {hf_, w, f1, f2, "in both"});
    ExpectBadInput(
        Sdrt("shard " + ShellQuote(hf_) + " " + ShellQuote(root_ + "/o") + " --mesh 2 --plan fsdp"),
        {hf_, w, f1, f2, "in both"});
    EXPECT_FALSE(fs::exists(root_ + "/o"));
    test::WriteHfFolder(hf_, tensors_, 3);
  }
  // 2. weight_map names "../outside.safetensors".
  {
    ASSERT_TRUE(WriteSafetensors(root_ + "/outside.safetensors", {tensors_[0]}).ok());
    Json index = good;
    index["weight_map"][w] = "../outside.safetensors";
    test::WriteHfIndex(hf_, index);
    ExpectBadInput(Sdrt("inspect " + ShellQuote(hf_)),
                   {hf_, "model.safetensors.index.json", "../outside.safetensors", w});
  }
  // 3. weight_map lacks a tensor that a file holds.
  {
    Json index = good;
    const std::string name = tensors_[10].first;
    const std::string file = index["weight_map"][name];
    index["weight_map"].erase(name);
    test::WriteHfIndex(hf_, index);
    ExpectBadInput(Sdrt("inspect " + ShellQuote(hf_)), {hf_, file, name, "does not name it"});
  }
  // 4. total_size disagrees with the files.
  {
    Json index = good;
    index["metadata"]["total_size"] = index["metadata"]["total_size"].get<int64_t>() - 4;
    test::WriteHfIndex(hf_, index);
    ExpectBadInput(Sdrt("inspect " + ShellQuote(hf_)),
                   {hf_, "model.safetensors.index.json", "total_size", f1});
    ExpectBadInput(Sdrt("inspect --json " + ShellQuote(hf_)), {hf_, "total_size"});
  }
}

// shard from the folder writes the checkpoint the single file gives: the same tensors,
// placements and hashes.
TEST_F(HfSourceCli, ShardHfFolderEqualsSingleFile) {
  const CommandResult a = Sdrt("shard " + ShellQuote(hf_) + " " + ShellQuote(root_ + "/a") +
                               " --mesh 2x2 --plan fsdp-tp");
  ASSERT_EQ(a.exit_code, 0) << a.all();
  EXPECT_THAT(a.out, HasSubstr(absl::StrCat(tensors_.size(), " tensors of ", hf_)));
  const CommandResult b = Sdrt("shard " + ShellQuote(single_) + " " + ShellQuote(root_ + "/b") +
                               " --mesh 2x2 --plan fsdp-tp");
  ASSERT_EQ(b.exit_code, 0) << b.all();
  const Json ia = Json::parse(ReadText(root_ + "/a/index.json"));
  const Json ib = Json::parse(ReadText(root_ + "/b/index.json"));
  EXPECT_EQ(ia["metadata"], ib["metadata"]);
  std::map<std::string, Json> want;
  for (const Json& t : ib["tensors"]) want[t["name"]] = t;
  ASSERT_EQ(ia["tensors"].size(), want.size());
  for (const Json& t : ia["tensors"]) EXPECT_EQ(t, want[t["name"]]) << t["name"];
  // The result is a valid sharded checkpoint.
  const CommandResult inspect = Sdrt("inspect " + ShellQuote(root_ + "/a"));
  EXPECT_EQ(inspect.exit_code, 0) << inspect.all();
  EXPECT_THAT(inspect.out, HasSubstr("sharded checkpoint (format 2): mesh 2x2"));
  // OUTDIR inside the source folder is refused.
  ExpectBadInput(
      Sdrt("shard " + ShellQuote(hf_) + " " + ShellQuote(hf_ + "/out") + " --mesh 2 --plan fsdp"),
      {hf_});
}

// A folder of safetensors files without an index: inspected like a Hugging Face folder; a
// name in two files is refused.
TEST_F(HfSourceCli, FolderWithoutIndex) {
  fs::remove(hf_ + "/model.safetensors.index.json");
  const CommandResult r = Sdrt("inspect --json " + ShellQuote(hf_));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Json parsed = ParseOut(r);
  EXPECT_EQ(parsed["kind"], "safetensors-folder");
  EXPECT_EQ(parsed["tensors"], tensors_.size());
  EXPECT_EQ(parsed["file_count"], 3);
  const CommandResult table = Sdrt("inspect " + ShellQuote(hf_));
  EXPECT_EQ(table.exit_code, 0) << table.all();
  EXPECT_THAT(table.out, HasSubstr("folder of safetensors files (no index), 3 files"));
  ASSERT_TRUE(WriteSafetensors(hf_ + "/zz.safetensors", {tensors_[3]}).ok());
  ExpectBadInput(Sdrt("inspect " + ShellQuote(hf_)),
                 {hf_, tensors_[3].first, "zz.safetensors", "in both"});
}

// One-rank `sdrt load` of the folder (no mpiexec), verified against the sharded checkpoint
// of the single file: the pieces loaded from the folder are the single file's.
TEST_F(HfSourceCli, LoadHfFolderMatchesSingleFile) {
  const std::string dir = root_ + "/from_single";
  ASSERT_EQ(Sdrt("shard " + ShellQuote(single_) + " " + ShellQuote(dir) + " --mesh 1 --plan fsdp")
                .exit_code,
            0);
  const CommandResult r = Sdrt("load " + ShellQuote(hf_) + " --mesh 1 --plan fsdp --verify " +
                               ShellQuote(dir) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Json l = ParseOut(r);
  EXPECT_TRUE(l.value("bit_exact", false)) << l;
  EXPECT_EQ(l["mismatches"], Json::array()) << l;
  EXPECT_EQ(l["tensors"], tensors_.size()) << l;
  // A case-054 folder is refused by load too.
  Json index = test::ReadHfIndex(hf_);
  index["metadata"]["total_size"] = 1;
  test::WriteHfIndex(hf_, index);
  ExpectBadInput(Sdrt("load " + ShellQuote(hf_) + " --mesh 1 --plan fsdp"), {hf_, "total_size"});
}

// A folder of more files than the open-file limit allows at once (300 files under `ulimit -n
// 128`) loads: the reads keep a bounded number of files open (a folder of 10,000 files under
// the default limit of 1,024). Every piece equals the single file's.
TEST_F(HfSourceCli, AFolderOfMoreFilesThanTheOpenFileLimitLoads) {
  std::vector<std::pair<std::string, Tensor>> many;
  for (int i = 0; i < 300; ++i) {
    many.emplace_back(absl::StrCat("layers.", i, ".weight"),
                      test::HashBytes({3, 5}, DType::kFloat32, static_cast<uint64_t>(i)));
  }
  const std::string folder = root_ + "/many";
  test::WriteHfFolder(folder, many, 300);
  const std::string file = root_ + "/many.safetensors";
  ASSERT_TRUE(WriteSafetensors(file, many).ok());
  const std::string dir = root_ + "/many_sharded";
  ASSERT_EQ(Sdrt("shard " + ShellQuote(file) + " " + ShellQuote(dir) + " --mesh 1 --plan fsdp")
                .exit_code,
            0);
  const CommandResult r = test::RunCommand(
      "ulimit -n 128 && timeout 60 " + std::string(SDRT_BINARY) + " load " + ShellQuote(folder) +
      " --mesh 1 --plan fsdp --read all --verify " + ShellQuote(dir) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Json l = ParseOut(r);
  EXPECT_TRUE(l.value("bit_exact", false)) << l;
  EXPECT_EQ(l["tensors"], 300) << l;
}

// A file of the folder that is a link loop (a -> b -> a) is bad input, one line naming the
// folder and the file, from every command that opens the folder (load said 1: ELOOP is
// absl's Unknown).
TEST_F(HfSourceCli, LinkLoopInFolderIsBadInput) {
  const std::string f1 = HfShardName(0, 3);
  fs::remove(hf_ + "/" + f1);
  fs::create_symlink(f1 + ".loop", hf_ + "/" + f1);
  fs::create_symlink(f1, hf_ + "/" + f1 + ".loop");
  const std::vector<std::string> names = {hf_, f1, "Too many levels of symbolic links"};
  ExpectBadInput(Sdrt("inspect " + ShellQuote(hf_)), names);
  ExpectBadInput(
      Sdrt("shard " + ShellQuote(hf_) + " " + ShellQuote(root_ + "/o") + " --mesh 2 --plan fsdp"),
      names);
  ExpectBadInput(Sdrt("load " + ShellQuote(hf_) + " --mesh 1 --plan fsdp"), names);
  ExpectBadInput(Sdrt("load " + ShellQuote(hf_) + " --mesh 1 --plan fsdp --json"), names);
  EXPECT_FALSE(fs::exists(root_ + "/o"));
}

#if SDRT_CLI_HAVE_MPIEXEC
// `sdrt demo --checkpoint` on the folder: shard, gather (compared with the folder tensor by
// tensor) and load under mpiexec -n 2, every step bit-exact. --bucket-mib at its largest
// reaches the children as it was given (not rounded to 6 digits, out of range).
TEST_F(HfSourceCli, DemoOnHfFolder) {
  const CommandResult r = test::RunCommand(
      "SDRT_MPIEXEC=" + ShellQuote(SDRT_MPIEXEC) + " timeout 300 " + std::string(SDRT_BINARY) +
      " demo --ranks 2 --bucket-mib 1048576 --json --checkpoint " + ShellQuote(hf_) +
      " --cache-dir " + ShellQuote(root_ + "/cache"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Json j = ParseOut(r);
  ASSERT_EQ(j["rows"].size(), 6u) << j;
  for (const Json& row : j["rows"]) EXPECT_TRUE(row.value("bit_exact", false)) << row;
}
#endif

}  // namespace
}  // namespace sdrt
