// `sdrt inspect` on the real checkpoint (all-MiniLM-L6-v2) and on bad input, checked
// against what the official safetensors package reported (tests/golden/record_minilm.py).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/support/minilm.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

using test::CommandResult;
using test::RunCommand;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

class MiniLM : public ::testing::Test {
 protected:
  void SetUp() override {
    SDRT_MINILM_OR_SKIP(path);
    path_ = path;
    expected_ = ReadJson(std::string(SDRT_TEST_DATA_DIR) + "/minilm_expected.json");
    ASSERT_FALSE(expected_.is_discarded());
  }

  std::string path_;
  nlohmann::json expected_;
};

TEST_F(MiniLM, ReaderAgreesWithTheSafetensorsPackage) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->file_size(), expected_["file_size"].get<int64_t>());
  ASSERT_EQ(file->entries().size(), expected_["tensors"].get<size_t>());
  int64_t parameters = 0;
  for (const nlohmann::json& e : expected_["entries"]) {
    const SafetensorsEntry* entry = file->Find(e["name"].get<std::string>());
    ASSERT_NE(entry, nullptr) << e["name"];
    EXPECT_EQ(SafetensorsCode(entry->dtype), e["dtype"].get<std::string>());
    EXPECT_EQ(std::vector<int64_t>(entry->shape.begin(), entry->shape.end()),
              e["shape"].get<std::vector<int64_t>>());
    absl::StatusOr<Tensor> t = file->Get(entry->name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->nbytes(), e["nbytes"].get<int64_t>());
    parameters += t->numel();
  }
  EXPECT_EQ(parameters, expected_["parameters"].get<int64_t>());
  using Metadata = std::map<std::string, std::string>;
  EXPECT_EQ(file->metadata(), expected_["metadata"].get<Metadata>());
}

TEST_F(MiniLM, InspectPrintsTheTableAndJson) {
  CommandResult table = RunCommand(std::string(SDRT_BINARY) + " inspect " + path_);
  ASSERT_EQ(table.exit_code, 0) << table.all();
  EXPECT_THAT(table.all(), HasSubstr("104 tensors, 22,713,728 parameters, 90,856,960 bytes"));
  EXPECT_THAT(table.all(), HasSubstr("embeddings.word_embeddings.weight"));
  EXPECT_THAT(table.all(), HasSubstr("[30522, 384]"));
  EXPECT_THAT(table.all(), HasSubstr("format = pt"));

  CommandResult json = RunCommand(std::string(SDRT_BINARY) + " inspect --json " + path_);
  ASSERT_EQ(json.exit_code, 0) << json.all();
  nlohmann::json parsed = nlohmann::json::parse(json.all(), nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json.all();
  EXPECT_EQ(parsed["tensors"], expected_["tensors"]);
  EXPECT_EQ(parsed["parameters"], expected_["parameters"]);
  EXPECT_EQ(parsed["bytes"], expected_["bytes"]);
  EXPECT_EQ(parsed["entries"].size(), 104u);
}

TEST(Inspect, BadFilesExitWithCode2AndTheReadersMessage) {
  const std::string tmp =
      (std::filesystem::path(test::TestTmpRoot()) / "inspect_bad.safetensors").string();
  {
    std::ofstream out(tmp, std::ios::binary);
    out << "PK\x03\x04 this is a zip archive, not safetensors";
  }
  CommandResult bad = RunCommand(std::string(SDRT_BINARY) + " inspect " + tmp);
  EXPECT_EQ(bad.exit_code, 2) << bad.all();
  EXPECT_THAT(bad.all(), HasSubstr("header length"));
  CommandResult missing =
      RunCommand(std::string(SDRT_BINARY) + " inspect /nonexistent.safetensors");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.all(), HasSubstr("/nonexistent.safetensors"));
  CommandResult no_args = RunCommand(std::string(SDRT_BINARY) + " inspect");
  EXPECT_EQ(no_args.exit_code, 2);
}

}  // namespace
}  // namespace sdrt
