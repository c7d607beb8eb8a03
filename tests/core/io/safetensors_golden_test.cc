// Golden tests against the official safetensors package, both directions:
//  - files it wrote (tests/data/safetensors/, made by tests/golden/make_safetensors_golden.py)
//    read bit-exact against expected.json and against values written out here;
//  - files sdrt writes into $SDRT_TEST_TMP/sdrt_written/, which the script's --check mode
//    verifies with the official reader (run by hand; see tests/golden/README.md).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using Metadata = std::map<std::string, std::string>;

const std::string kDataDir = std::string(SDRT_TEST_DATA_DIR) + "/safetensors";

nlohmann::json Expected() {
  std::ifstream in(kDataDir + "/expected.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::string Hex(const Tensor& t) {
  Tensor c = *t.Contiguous();
  return absl::BytesToHexString(
      absl::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes()));
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

SafetensorsFile OpenGolden(const std::string& name) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(kDataDir + "/" + name);
  EXPECT_TRUE(file.ok()) << file.status();
  return *std::move(file);
}

TEST(SafetensorsGolden, OfficialFilesMatchExpectationsBitExact) {
  const nlohmann::json expected = Expected();
  ASSERT_FALSE(expected.is_discarded());
  ASSERT_EQ(expected.size(), 4u);
  for (const auto& [file_name, want] : expected.items()) {
    SCOPED_TRACE(file_name);
    SafetensorsFile file = OpenGolden(file_name);
    EXPECT_EQ(file.header_size(), want["header_size"].get<int64_t>());
    EXPECT_EQ(file.metadata(), want["metadata"].get<Metadata>());
    const nlohmann::json& tensors = want["tensors"];
    ASSERT_EQ(file.entries().size(), tensors.size());
    for (const SafetensorsEntry& e : file.entries()) {
      SCOPED_TRACE(e.name);
      ASSERT_TRUE(tensors.contains(e.name));
      const nlohmann::json& t = tensors[e.name];
      EXPECT_EQ(SafetensorsCode(e.dtype), t["dtype"].get<std::string>());
      EXPECT_EQ(std::vector<int64_t>(e.shape.begin(), e.shape.end()),
                t["shape"].get<std::vector<int64_t>>());
      EXPECT_THAT(t["data_offsets"].get<std::vector<int64_t>>(),
                  ElementsAre(e.data_begin, e.data_end));
      absl::StatusOr<Tensor> got = file.Get(e.name);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->shape(), e.shape);
      EXPECT_EQ(Hex(*got), t["hex"].get<std::string>());
    }
  }
}

// The same values, written out here rather than taken from expected.json.
TEST(SafetensorsGolden, DTypesFileHoldsTheScriptsValues) {
  SafetensorsFile file = OpenGolden("dtypes.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_THAT(Values<uint8_t>(*file.Get("bool")), ElementsAre(1, 0, 1, 1, 0, 0));
  EXPECT_THAT(Values<int8_t>(*file.Get("int8")), ElementsAre(-128, -1, 0, 1, 127));
  EXPECT_THAT(Values<int64_t>(*file.Get("int64")),
              ElementsAre(INT64_MIN, -1, 0, (int64_t{1} << 40) + 5, INT64_MAX));
  Tensor f32 = *file.Get("float32");
  EXPECT_THAT(f32.shape(), ElementsAre(2, 3, 2));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(f32.data<float>()[i], static_cast<float>(i) / 3) << i;
  EXPECT_THAT(Values<uint16_t>(*file.Get("bfloat16")),  // -3 + 1.5 i
              ElementsAre(0xC040, 0xBFC0, 0x0000, 0x3FC0, 0x4040, 0x4090));
  EXPECT_THAT(Values<uint16_t>(*file.Get("float16")),
              ElementsAre(0xBE00, 0x8000, 0x3600, 0x7BFF, 0x7C00, 0xFC00, 0x0001, 0x3C00));
  EXPECT_THAT(Values<uint8_t>(*file.Get("float8_e4m3fn")),
              ElementsAre(0x00, 0x30, 0x38, 0xC0, 0x7E, 0xFE, 0x01));
  EXPECT_THAT(Values<uint8_t>(*file.Get("float8_e5m2")),
              ElementsAre(0x00, 0x3C, 0xC0, 0x7B, 0xFC, 0x01));
  Tensor scalar = *file.Get("scalar_f32");
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(*scalar.data<float>(), 3.25f);
}

// case-045: another tool's 42,854-byte header leaves the data region at byte 42,862.
TEST(SafetensorsGolden, Case045ForeignUnalignedFileReadsBitExact) {
  SafetensorsFile file = OpenGolden("unaligned_bf16.safetensors");
  EXPECT_EQ(file.header_size(), 42854);
  EXPECT_EQ(file.data_offset(), 42862);
  Tensor aligned = *file.Get("bf16_aligned");  // byte 42862: 2-aligned, borrowed
  EXPECT_EQ(aligned.storage(), file.storage());
  EXPECT_THAT(Values<uint16_t>(aligned), ElementsAre(0x3F80, 0xC020, 0x4049, 0x3C00));
  for (const char* name : {"bf16_unaligned", "f32_unaligned", "i64_unaligned"}) {
    Tensor t = *file.Get(name);  // odd addresses: copied into aligned memory
    EXPECT_NE(t.storage(), file.storage()) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % ElementAlignment(t.dtype()), 0u) << name;
  }
  EXPECT_THAT(Values<uint16_t>(*file.Get("bf16_unaligned")),
              ElementsAre(0x3F00, 0xBF80, 0x4380, 0x8000, 0x3A83));
  EXPECT_THAT(Values<float>(*file.Get("f32_unaligned")), ElementsAre(1.5f, -2.25f, 1e30f));
  EXPECT_THAT(Values<int64_t>(*file.Get("i64_unaligned")), ElementsAre((int64_t{1} << 62) + 3, -5));
  EXPECT_THAT(Values<uint8_t>(*file.Get("u8_odd")), ElementsAre(7, 8, 9));
}

// Rewrites every golden file with sdrt (plus a non-contiguous source) for the script's
// --check mode, and checks here that sdrt reads back what it wrote.
TEST(SafetensorsGolden, WritesFilesForTheOfficialChecker) {
  const fs::path dir = fs::path(test::TestTmpRoot()) / "sdrt_written";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::map<std::string, std::pair<std::vector<std::pair<std::string, Tensor>>, Metadata>> files;
  const nlohmann::json expected = Expected();
  ASSERT_FALSE(expected.is_discarded());
  for (const auto& item : expected.items()) {
    SafetensorsFile file = OpenGolden(item.key());
    const std::string& file_name = item.key();
    for (const SafetensorsEntry& e : file.entries()) {
      files[file_name].first.emplace_back(e.name, *file.Get(e.name));
    }
    files[file_name].second = file.metadata();
  }
  Tensor grid = *Tensor::Empty({4, 6}, DType::kFloat32);
  for (int i = 0; i < 24; ++i) grid.data<float>()[i] = static_cast<float>(i);
  files["noncontiguous.safetensors"] = {{{"sliced", *grid.Slice(1, 0, 6, 2)}},
                                        {{"layout", "strided"}}};

  for (const auto& [file_name, content] : files) {
    SCOPED_TRACE(file_name);
    const std::string path = (dir / file_name).string();
    ASSERT_TRUE(WriteSafetensors(path, content.first, content.second).ok());
    SafetensorsFile back = *SafetensorsFile::Open(path);
    EXPECT_EQ(back.data_offset() % 8, 0);  // sdrt always pads: case-045's writer half
    EXPECT_EQ(back.metadata(), content.second);
    ASSERT_EQ(back.entries().size(), content.first.size());
    for (const auto& [name, tensor] : content.first) {
      Tensor got = *back.Get(name);
      EXPECT_EQ(Hex(got), Hex(tensor)) << name;
      // sdrt lays its data out aligned: every tensor with bytes borrows the mapping.
      if (got.numel() > 0) {
        EXPECT_EQ(got.storage(), back.storage()) << name << " was copied";
      }
    }
  }
  std::cout << "sdrt wrote " << files.size() << " files into " << dir.string() << "\n";
}

}  // namespace
}  // namespace sdrt
