// Unit tests of the safetensors reader and writer: round trips, cases 040-046, one crafted
// malformed header per validation rule, zero-copy versus copy, and the atomic write.
#include "sdrt/core/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::sdrt::test::HashBytes;
using ::sdrt::test::Image;
using ::sdrt::test::Parse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A fresh, empty folder for the running test under SDRT_TEST_TMP (set by CTest).
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(test::TestTmpRoot()) / "safetensors_test_files" /
                 (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// How many times `needle` occurs in `text`.
int CountOf(absl::string_view text, absl::string_view needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != absl::string_view::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

std::string Bytes(const Tensor& t) {
  Tensor c = *t.Contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

TEST(SafetensorsRoundTrip, EveryDTypeBitExactWithMetadata) {
  const std::string path = TestDir() + "/all.safetensors";
  const std::vector<std::vector<int64_t>> shapes = {{3}, {2, 3}, {}, {4, 1, 2}};
  NamedTensors tensors;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dtype = static_cast<DType>(i);
    const IntVector shape =
        IsSubByte(dtype) ? IntVector{4, 2} : IntVector(shapes[i % 4].begin(), shapes[i % 4].end());
    tensors.emplace_back(std::string(DTypeName(dtype)), HashBytes(shape, dtype, i));
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"ключ", "значение"}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->header_size() % 8, 0);
  EXPECT_EQ(file->file_size(), static_cast<int64_t>(fs::file_size(path)));
  EXPECT_EQ(file->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"ключ", "значение"}}));
  ASSERT_EQ(file->entries().size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    const SafetensorsEntry* e = file->Find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->dtype, want.dtype());
    EXPECT_EQ(e->shape, want.shape());
    EXPECT_EQ(e->data_begin % ElementAlignment(want.dtype()), 0) << name;
    absl::StatusOr<Tensor> got = file->Get(name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->dtype(), want.dtype());
    EXPECT_EQ(got->shape(), want.shape());
    EXPECT_EQ(Bytes(*got), Bytes(want)) << name;
  }
  // The data is laid out by element size, largest first, the given order within a size.
  std::vector<std::string> data_order;
  for (const SafetensorsEntry& e : file->entries()) data_order.push_back(e.name);
  EXPECT_THAT(data_order,
              ElementsAre("int64", "float64", "uint64", "complex64", "int32", "float32", "uint32",
                          "int16", "float16", "bfloat16", "uint16", "bool", "uint8", "int8",
                          "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                          "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn_x2"));
}

// The data of sdrt's own files is aligned for its zero-copy reader: every tensor with bytes
// starts at a multiple of its element size, the header keeps the given order.
TEST(SafetensorsWriter, LaysDataOutLargestElementFirstSoEveryTensorIsZeroCopy) {
  const std::string path = TestDir() + "/aligned.safetensors";
  const NamedTensors tensors = {{"a", HashBytes({3}, DType::kFloat32, 1)},
                                {"b", HashBytes({}, DType::kBFloat16, 2)},
                                {"c", HashBytes({0, 7}, DType::kInt64, 3)},
                                {"d", HashBytes({5}, DType::kBool, 4)},
                                {"e", HashBytes({2}, DType::kFloat32, 5)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  const std::string json = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                           R"("b":{"dtype":"BF16","shape":[],"data_offsets":[20,22]},)"
                           R"("c":{"dtype":"I64","shape":[0,7],"data_offsets":[0,0]},)"
                           R"("d":{"dtype":"BOOL","shape":[5],"data_offsets":[22,27]},)"
                           R"("e":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  const std::string file_bytes = ReadAll(path);
  EXPECT_EQ(file_bytes.substr(8, json.size()), json);
  SafetensorsFile file = *SafetensorsFile::Open(path);
  EXPECT_EQ(file.data_offset() % 8, 0);
  const char* map_begin = static_cast<const char*>(file.storage()->data());
  for (const auto& [name, want] : tensors) {
    Tensor got = *file.Get(name);
    EXPECT_EQ(Bytes(got), Bytes(want)) << name;
    if (want.numel() == 0) continue;  // owns an empty storage
    EXPECT_EQ(got.storage(), file.storage()) << name << " was copied";
    const char* ptr = static_cast<const char*>(got.data_ptr());
    EXPECT_EQ(ptr, map_begin + file.data_offset() + file.Find(name)->data_begin) << name;
  }
}

TEST(SafetensorsWriter, HeaderIsTheReferenceWritersCompactJson) {
  const std::string path = TestDir() + "/two.safetensors";
  Tensor b = *Tensor::Empty({2}, DType::kFloat32);
  b.data<float>()[0] = 1.0f;
  b.data<float>()[1] = -2.0f;
  Tensor a = *Tensor::Empty({3}, DType::kInt8);
  std::memcpy(a.data_ptr(), "\x01\x02\x03", 3);
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"b", b}, {"a", a}}).ok());
  const std::string json = R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("a":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}})";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  EXPECT_EQ(ReadAll(path), Image(padded, std::string("\0\0\x80\x3f\0\0\0\xc0\x01\x02\x03", 11)));
}

TEST(SafetensorsWriter, NonContiguousInputIsWrittenInLogicalOrder) {
  const std::string path = TestDir() + "/strided.safetensors";
  Tensor base = *Tensor::Empty({3, 6}, DType::kInt32);
  for (int i = 0; i < 18; ++i) base.data<int32_t>()[i] = i;
  Tensor every_other = *base.Slice(1, 0, 6, 2);  // [3, 3], strides [6, 2]
  Tensor transposed = *Tensor::FromStorage(base.storage(), DType::kInt32, {6, 3}, {1, 6});
  ASSERT_FALSE(every_other.is_contiguous());
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"s", every_other}, {"t", transposed}}).ok());
  SafetensorsFile file = *SafetensorsFile::Open(path);
  Tensor s = *file.Get("s");
  EXPECT_THAT(std::vector<int32_t>(s.data<int32_t>(), s.data<int32_t>() + 9),
              ElementsAre(0, 2, 4, 6, 8, 10, 12, 14, 16));
  Tensor t = *file.Get("t");
  EXPECT_THAT(t.shape(), ElementsAre(6, 3));
  EXPECT_THAT(std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + 6),
              ElementsAre(0, 6, 12, 1, 7, 13));
}

// case-040: several empty tensors share offsets [0, 0] without being "shared storage".
TEST(SafetensorsCases, Case040SeveralEmptyTensors) {
  const std::string dir = TestDir();
  const std::vector<std::vector<int64_t>> shapes = {{0}, {2, 0}};
  for (const auto& shape : shapes) {
    const std::string path = dir + "/" + ShapeToString(shape) + ".safetensors";
    NamedTensors tensors = {{"A", *Tensor::Empty(shape, DType::kFloat32)},
                            {"B", *Tensor::Empty(shape, DType::kFloat32)}};
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
    SafetensorsFile file = *SafetensorsFile::Open(path);
    ASSERT_EQ(file.entries().size(), 2u);
    for (const SafetensorsEntry& e : file.entries()) {
      EXPECT_EQ(e.dtype, DType::kFloat32);
      EXPECT_EQ(e.shape, IntVector(shape.begin(), shape.end()));
      EXPECT_EQ(e.data_begin, 0);
      EXPECT_EQ(e.data_end, 0);
      EXPECT_EQ(file.Get(e.name)->numel(), 0);
    }
    EXPECT_EQ(file.entries()[0].name, "A");  // zero-length ties keep the header's order
  }
}

// case-041: metadata only; the header is exactly the reference's bytes.
TEST(SafetensorsCases, Case041MetadataOnly) {
  const std::string path = TestDir() + "/meta.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}, {{"key", "value"}}).ok());
  EXPECT_EQ(ReadAll(path), Image(R"({"__metadata__":{"key":"value"}})"));
  SafetensorsFile file = *SafetensorsFile::Open(path);
  EXPECT_TRUE(file.entries().empty());
  EXPECT_EQ(file.metadata().at("key"), "value");
  ASSERT_TRUE(WriteSafetensors(path, {}, {{"k", "v"}}).ok());  // 25 bytes: padded to 32
  EXPECT_EQ(ReadAll(path), Image(R"({"__metadata__":{"k":"v"}})" + std::string(6, ' ')));
}

// case-042: metadata values must be strings; the error names the key.
TEST(SafetensorsCases, Case042NonStringMetadataValue) {
  absl::StatusOr<SafetensorsFile> bad = Parse(Image(R"({"__metadata__":{"unquoted_int":0}})"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"unquoted_int\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("must be strings"));
  absl::StatusOr<SafetensorsFile> good = Parse(Image(R"({"__metadata__":{"quoted_int":"0"}})"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->metadata().at("quoted_int"), "0");
}

// case-043: the reserved name is refused before any file is created.
TEST(SafetensorsCases, Case043ReservedNameLeavesNothingOnDisk) {
  const std::string dir = TestDir();
  Tensor t = *Tensor::Zeros({1, 2}, DType::kInt32);
  absl::Status s = WriteSafetensors(dir + "/x.safetensors", NamedTensors{{"__metadata__", t}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"__metadata__\": the name is reserved"));
  EXPECT_TRUE(ListDir(dir).empty());
}

// case-044: header lengths past the cap or the file fail before any allocation.
TEST(SafetensorsCases, Case044HeaderPastCapOrPastFile) {
  const std::string dir = TestDir();
  std::string past_cap(16, '\0');
  const uint64_t huge = 132'095'296;
  std::memcpy(past_cap.data(), &huge, 8);  // little-endian host
  WriteRaw(dir + "/cap.safetensors", past_cap);
  WriteRaw(dir + "/zip.safetensors", std::string("PK\x03\x04\x14\0\0\0\x08\0", 10) + "zipdata");
  std::string short_file(20, ' ');
  std::memcpy(short_file.data(), "\xe8\x03\0\0\0\0\0\0", 8);  // 1000
  WriteRaw(dir + "/short.safetensors", short_file);
  const std::pair<const char*, const char*> cases[] = {
      {"cap", "header length 132095296 exceeds the cap of 100000000"},
      {"zip", "first 8 bytes 0x504b030414000000; not a safetensors file?"},
      {"short", "header length 1000 runs past the end of the 20-byte file"}};
  for (const auto& [name, message] : cases) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir + "/" + name + ".safetensors");
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(f.status().message(), HasSubstr(message));
    EXPECT_THAT(f.status().message(), HasSubstr(name));  // the path
  }
  for (int size : {0, 5}) {
    WriteRaw(dir + "/tiny.safetensors", std::string(size, '\x01'));
    const absl::Status tiny = SafetensorsFile::Open(dir + "/tiny.safetensors").status();
    EXPECT_EQ(tiny.code(), absl::StatusCode::kInvalidArgument) << tiny;
    EXPECT_THAT(tiny.message(),
                HasSubstr(absl::StrCat("file has ", size, " bytes, fewer than the 8-byte")));
  }
}

// case-045: a tensor at an address that is not a multiple of its element size is copied
// into aligned memory; an aligned one borrows the mapping. (The 42,854-byte header file of
// another tool is read in safetensors_golden_test.cc.)
TEST(SafetensorsCases, Case045UnalignedTensorsAreCopiedAlignedOnesBorrowed) {
  const std::string path = TestDir() + "/unaligned.safetensors";
  const std::string json =
      R"({"o":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"BF16","shape":[2],)"
      R"("data_offsets":[1,5]},"x":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})";
  for (int pad = 0; pad < 2; ++pad) {  // one space more or less moves "b" by one byte
    WriteRaw(path, Image(json + std::string(pad, ' '), std::string("\x07\x80\x3f\x00\xc0\x09", 6)));
    SafetensorsFile file = *SafetensorsFile::Open(path);
    ASSERT_EQ(file.storage()->kind(), StorageKind::kMappedFile);
    const bool aligned = (file.data_offset() + 1) % 2 == 0;  // the mapping is page-aligned
    const char* map_begin = static_cast<const char*>(file.storage()->data());
    Tensor b = *file.Get("b");
    const char* b_ptr = static_cast<const char*>(b.data_ptr());
    if (aligned) {  // zero copy: a view of the mapping
      EXPECT_EQ(b.storage(), file.storage());
      EXPECT_EQ(b_ptr, map_begin + file.data_offset() + 1);
    } else {  // copied into fresh aligned memory
      EXPECT_NE(b.storage(), file.storage());
      EXPECT_EQ(b.storage()->kind(), StorageKind::kCpu);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b_ptr) % 2, 0u);
    }
    EXPECT_THAT(std::vector<uint16_t>(b.data<uint16_t>(), b.data<uint16_t>() + 2),
                ElementsAre(0x3f80, 0xc000))  // bf16 1.0, -2.0
        << "pad " << pad;
    EXPECT_EQ(*file.Get("x")->data<uint8_t>(), 9);
  }
}

// case-046: float8 and bfloat16 round-trip bit-exact; a dtype code safetensors does not
// define either (F8_E8M0 and F4 now are read) is an error naming the dtype and the tensor.
TEST(SafetensorsCases, Case046NewerDTypes) {
  const std::string path = TestDir() + "/f8.safetensors";
  Tensor e4m3 = *Tensor::Empty({3}, DType::kFloat8E4M3FN);
  std::memcpy(e4m3.data_ptr(), "\x38\xc0\x7e", 3);  // 1.0, -2.0, 448
  Tensor e5m2 = *Tensor::Empty({3}, DType::kFloat8E5M2);
  std::memcpy(e5m2.data_ptr(), "\x3c\xc0\x7b", 3);  // 1.0, -2.0, 57344
  Tensor bf16 = *Tensor::Empty({2}, DType::kBFloat16);
  std::memcpy(bf16.data_ptr(), "\x80\x3f\x49\x40", 4);  // 1.0, 3.140625
  NamedTensors tensors = {{"a", e4m3}, {"b", e5m2}, {"c", bf16}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  SafetensorsFile file = *SafetensorsFile::Open(path);
  EXPECT_EQ(file.Find("a")->dtype, DType::kFloat8E4M3FN);
  EXPECT_EQ(file.Find("b")->dtype, DType::kFloat8E5M2);
  for (const auto& [name, tensor] : tensors) EXPECT_EQ(Bytes(*file.Get(name)), Bytes(tensor));
  for (const char* code : {"F3", "Q4_K"}) {
    absl::StatusOr<SafetensorsFile> f = Parse(Image(
        absl::StrCat(R"({"scale":{"dtype":")", code, R"(","shape":[2],"data_offsets":[0,1]}})"),
        "a"));
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(f.status().message(),
                HasSubstr(absl::StrCat("tensor \"scale\": unknown dtype \"", code,
                                       "\" (not a safetensors dtype)")));
  }
}

// One crafted header per validation rule: (header, data, a substring of the message).
struct BadHeader {
  std::string header;
  std::string data;
  std::string message;
};

TEST(SafetensorsReader, EveryValidationRuleRejectsItsMalformedHeader) {
  const std::string w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\0');
  const BadHeader cases[] = {
      {"{\"w\xff\":1}", "", "safetensors header is not valid UTF-8 at byte 3 (0xff)"},
      {"", "", "must be a JSON object, found nothing"},
      {"   ", "", "must be a JSON object, found nothing"},
      {"[1]", "", "must be a JSON object, found '['"},
      {" \n 7", "", "must be a JSON object, found '7'"},
      {"{\"w\":", "", "invalid JSON: [json.exception.parse_error"},
      {"{}x", "", "trailing characters after the JSON object at byte 2"},
      {"{" + w + "," + w + "}", eight + eight, "duplicate key \"w\""},
      {R"({"w":{"dtype":"F32","dtype":"F32"}})", "", "duplicate key \"dtype\""},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":)" + std::string(126, '[') +
           std::string(126, ']') + "}}",
       eight, "JSON nested deeper than 127 levels"},  // serde_json's limit
      {R"({"w":[1]})", "", "tensor \"w\": entry must be an object, got array"},
      {R"({"w":{"dtype":"F32","shape":[]}})", "", "tensor \"w\": missing \"data_offsets\""},
      {R"({"w":{"dtype":7,"shape":[],"data_offsets":[0,4]}})", "", "dtype must be a string"},
      {R"({"w":{"dtype":"F32","shape":3,"data_offsets":[0,4]}})", "", "shape must be an array"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "",
       "tensor \"w\": shape[0] must be a non-negative 64-bit integer, got -1"},
      {R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight,
       "shape[0] must be a non-negative 64-bit integer, got 2.0"},
      {R"({"w":{"dtype":"F32","shape":[")" + std::string(100, 'a') + R"("],"data_offsets":[0,4]}})",
       "", "got \"" + std::string(63, 'a') + "..."},  // long values are cut in messages
      {R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", eight,
       "shape[0] must be a non-negative 64-bit integer"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight,
       "tensor \"w\": byte size of shape [4294967296, 4294967296] overflows int64"},
      {R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", eight,
       "overflows int64"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight,
       "data_offsets must be an array [begin, end]"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", eight,
       "data_offsets[1] must be a non-negative 64-bit integer"},
      {R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight,
       "data_offsets [8, 0] must satisfy 0 <= begin <= end <= 8"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight,
       "data_offsets [0, 16] must satisfy 0 <= begin <= end <= 8"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd",
       "tensor \"w\": data_offsets [0, 4] span 4 bytes but F32[2] needs 8"},
      {"{" + w + R"(,"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", eight + "abcd",
       "tensor \"v\": data_offsets [4, 12] overlap tensor \"w\" [0, 8]"},
      {"{" + w + R"(,"z":{"dtype":"I8","shape":[0],"data_offsets":[4,4]}})", eight,
       "tensor \"z\": data_offsets [4, 4] overlap tensor \"w\""},
      {"{" + w + R"(,"v":{"dtype":"I8","shape":[4],"data_offsets":[12,16]}})", eight + eight,
       "tensor \"v\": data_offsets [12, 16] leave a hole: bytes [8, 12) belong to no tensor"},
      {"{" + w + "}", eight + "x", "the data region has 9 bytes but the tensors cover only [0, 8)"},
      {R"({"__metadata__":["a"]})", "", "\"__metadata__\" must be an object or null, got array"},
      {R"({"w":null})", "", "tensor \"w\": entry must be an object, got null"},
  };
  for (const BadHeader& c : cases) {
    absl::StatusOr<SafetensorsFile> file = Parse(Image(c.header, c.data));
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << c.header;
    EXPECT_THAT(file.status().message(), HasSubstr(c.message)) << c.header;
  }
}

TEST(SafetensorsReader, TensorsKeepTheMappingAliveAndMissingNamesAreNotFound) {
  const std::string path = TestDir() + "/keep.safetensors";
  Tensor want = HashBytes({4, 4}, DType::kFloat64, 9);
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"w", want}}).ok());
  Tensor got;
  {
    SafetensorsFile file = *SafetensorsFile::Open(path);
    got = *file.Get("w");
    EXPECT_EQ(got.storage(), file.storage());
    absl::StatusOr<Tensor> missing = file.Get("nope");
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(missing.status().message(),
                HasSubstr("keep.safetensors: no tensor named \"nope\""));
    EXPECT_EQ(file.Find("nope"), nullptr);
  }
  EXPECT_EQ(Bytes(got), Bytes(want));  // the file object is gone, the mapping is not
}

TEST(SafetensorsReader, OpenReportsMissingFilesFoldersAndCpuOnlyBuffers) {
  const std::string dir = TestDir();
  absl::Status absent = SafetensorsFile::Open(dir + "/absent").status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(absent.message(), dir + "/absent: No such file or directory");
  absl::Status folder = SafetensorsFile::Open(dir).status();
  EXPECT_EQ(folder.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(folder.message(), dir + ": not a regular file (a folder)");
  // A loop of symbolic links: a broken path, bad input (was Unknown).
  fs::create_symlink(dir + "/loop_b", dir + "/loop_a");
  fs::create_symlink(dir + "/loop_a", dir + "/loop_b");
  absl::Status loop = SafetensorsFile::Open(dir + "/loop_a").status();
  EXPECT_EQ(loop.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop.message(), dir + "/loop_a: Too many levels of symbolic links");
  const absl::Status null = SafetensorsFile::FromBuffer(nullptr).status();
  EXPECT_EQ(null.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(null.message(), HasSubstr("FromBuffer: needs a CPU storage"));
  // A device storage is refused without touching its (here fake) pointer.
  auto device = Storage::Borrow(reinterpret_cast<void*>(0x1000), 64, Device::CUDA(0));
  const absl::Status on_device = SafetensorsFile::FromBuffer(device).status();
  EXPECT_EQ(on_device.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(on_device.message(), HasSubstr("FromBuffer: needs a CPU storage"));
}

// A FIFO must be refused without blocking in open(2) until some writer appears.
TEST(SafetensorsReader, OpenRefusesAFifoWithoutBlocking) {
  const std::string fifo = TestDir() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::future<absl::Status> opened =
      std::async(std::launch::async, [&fifo] { return SafetensorsFile::Open(fifo).status(); });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Blocked in open(O_RDONLY): appear as a writer so that it returns and the test ends.
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) close(fd);
    ADD_FAILURE() << "SafetensorsFile::Open blocked on a FIFO for 10 s";
  }
  absl::Status status = opened.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), fifo + ": not a regular file (a FIFO)");
}

// Pinning without a device (the gpu twin, safetensors_gpu_test.cc, pins for real): by
// default the file opens pageable and says why; without the fallback Open fails.
TEST(SafetensorsReader, PinMappingWithoutADeviceFallsBackOrFails) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present; see safetensors_gpu_test";
  const std::string path = TestDir() + "/pin.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"w", HashBytes({64}, DType::kUInt8, 1)}}).ok());
  SafetensorsFile::Options options;
  options.pin_mapping = true;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path, options);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->storage()->is_pinned());
  EXPECT_EQ(file->pin_status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(file->pin_status().message()),
              StartsWith(path + ": pinning the mapping: "));
  EXPECT_EQ(Bytes(*file->Get("w")), Bytes(HashBytes({64}, DType::kUInt8, 1)));

  options.pageable_fallback = false;
  file = SafetensorsFile::Open(path, options);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(file.status().message()), StartsWith(path + ": pinning the mapping: "));
  // Not asked to pin: nothing to report.
  EXPECT_TRUE(SafetensorsFile::Open(path)->pin_status().ok());
}

TEST(SafetensorsReader, PinChunkBytesMustBePositive) {
  const std::string path = TestDir() + "/pin.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"w", HashBytes({8}, DType::kUInt8, 1)}}).ok());
  SafetensorsFile::Options options;
  options.pin_mapping = true;
  options.pin_chunk_bytes = 0;
  absl::Status status = SafetensorsFile::Open(path, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), path + ": pin_chunk_bytes must be >= 1, got 0");
}

TEST(SafetensorsWriter, RefusesBadInputBeforeCreatingAnyFile) {
  const std::string dir = TestDir();
  Tensor t = *Tensor::Zeros({2}, DType::kFloat32);
  const std::pair<NamedTensors, std::string> cases[] = {
      {{{"a", t}, {"a", t}}, "tensor \"a\": duplicate name"},
      {{{"m", *Tensor::Meta({2}, DType::kFloat32)}}, "tensor \"m\": a meta tensor has no data"},
      {{{"u", Tensor()}}, "tensor \"u\": undefined tensor"},
      {{{"bad\xff", t}}, "tensor name \"bad\\xff\" is not valid UTF-8 at byte 3"},
  };
  for (const auto& [tensors, message] : cases) {
    absl::Status s = WriteSafetensors(dir + "/x.safetensors", tensors);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(s.message(), HasSubstr(message));
    EXPECT_THAT(s.message(), HasSubstr("WriteSafetensors(\"" + dir + "/x.safetensors\")"));
  }
  const absl::Status utf8 = WriteSafetensors(dir + "/x", {}, {{"k", "\xc3"}});
  EXPECT_EQ(utf8.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(utf8.message(),
              HasSubstr("metadata key \"k\" or its value is not valid UTF-8 at byte 0 (0xc3)"));
  const absl::Status folder = WriteSafetensors(dir + "/", {});
  EXPECT_EQ(folder.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(folder.message(), HasSubstr("the path names a folder, not a file"));
  absl::Status huge = WriteSafetensors(dir + "/x", {}, {{"k", std::string(100'000'000, 'a')}});
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.message(), HasSubstr("the header would have 100000032 bytes, past the"));
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(SafetensorsWriter, FailedWritesLeaveTheTargetAndNoTemporaryFile) {
  const std::string dir = TestDir();
  const std::string path = dir + "/model.safetensors";
  Tensor t = HashBytes({8}, DType::kInt16, 2);
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"old", t}}).ok());
  const std::string before = ReadAll(path);
  absl::Status reserved = WriteSafetensors(path, NamedTensors{{"__metadata__", t}});
  EXPECT_EQ(reserved.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reserved.message(),
              HasSubstr("tensor \"__metadata__\": the name is reserved for the header's metadata"));
  EXPECT_EQ(ReadAll(path), before);
  // The rename fails (the target is a non-empty folder) after the temporary file was
  // written: it must be removed.
  fs::create_directories(dir + "/folder/inside");
  absl::Status s = WriteSafetensors(dir + "/folder", NamedTensors{{"w", t}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("rename"));
  EXPECT_THAT(std::string(s.message()),
              StartsWith("WriteSafetensors(\"" + dir + "/folder\"): rename(\""));
  EXPECT_EQ(CountOf(s.message(), dir + "/folder"), 1) << s.message();  // named once
  absl::Status missing = WriteSafetensors(dir + "/no/such/dir/x.safetensors", {});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "WriteSafetensors(\"" + dir +
                                   "/no/such/dir/x.safetensors\"): open(\"" + dir +
                                   "/no/such/dir/.x.safetensors.tmp.*\"): No such file or "
                                   "directory");
  EXPECT_THAT(ListDir(dir), ElementsAre("folder", "model.safetensors"));
  // A successful overwrite replaces the bytes and leaves no temporary file either.
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"new", t}}).ok());
  EXPECT_NE(SafetensorsFile::Open(path)->Find("new"), nullptr);
  EXPECT_THAT(ListDir(dir), ElementsAre("folder", "model.safetensors"));
  // Told not to replace, a file that is there by the rename is kept (two `sdrt gather`
  // runs into one OUT both reported success, the later one's file replacing the first's).
  WriteSafetensorsOptions keep;
  keep.replace_existing = false;
  const std::string now = ReadAll(path);
  absl::Status kept = WriteSafetensors(path, NamedTensors{{"newer", t}}, {}, keep);
  EXPECT_EQ(kept.code(), absl::StatusCode::kAlreadyExists) << kept;
  EXPECT_THAT(kept.message(), HasSubstr(path + " exists"));
  EXPECT_EQ(ReadAll(path), now);
  EXPECT_THAT(ListDir(dir), ElementsAre("folder", "model.safetensors"));
  ASSERT_TRUE(WriteSafetensors(dir + "/fresh.safetensors", NamedTensors{{"w", t}}, {}, keep).ok());
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// A rewrite keeps the permission bits of the file it replaces; a new file gets 0666 & ~umask.
TEST(SafetensorsWriter, RewriteKeepsTheTargetsPermissions) {
  const std::string dir = TestDir();
  const std::string path = dir + "/private.safetensors";
  const NamedTensors tensors = {{"w", HashBytes({4}, DType::kInt32, 1)}};
  const mode_t old_umask = umask(022);
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  EXPECT_EQ(ModeOf(path), 0644u);
  umask(077);
  ASSERT_TRUE(WriteSafetensors(dir + "/new.safetensors", tensors).ok());
  EXPECT_EQ(ModeOf(dir + "/new.safetensors"), 0600u);
  umask(022);
  for (mode_t mode : {0600, 0640, 0444, 0664}) {
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
    EXPECT_EQ(ModeOf(path), mode) << std::oct << mode;
  }
  umask(old_umask);
  EXPECT_THAT(ListDir(dir), ElementsAre("new.safetensors", "private.safetensors"));
}

// Writing through a symlink replaces the file it resolves to and leaves the link in place.
TEST(SafetensorsWriter, WritingThroughASymlinkReplacesTheFileItPointsTo) {
  const std::string dir = TestDir();
  fs::create_directories(dir + "/store/sub");
  const std::string real = dir + "/store/sub/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(real, NamedTensors{{"old", HashBytes({2}, DType::kInt8, 1)}}).ok());
  ASSERT_EQ(chmod(real.c_str(), 0600), 0);
  fs::create_symlink("store/sub/model.safetensors", dir + "/link");  // relative
  fs::create_symlink(dir + "/link", dir + "/chain");                 // absolute, to a link
  const NamedTensors first = {{"first", HashBytes({3}, DType::kFloat32, 2)}};
  ASSERT_TRUE(WriteSafetensors(dir + "/chain", first).ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/chain"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link"));
  EXPECT_EQ(fs::read_symlink(dir + "/link"), "store/sub/model.safetensors");
  SafetensorsFile file = *SafetensorsFile::Open(real);
  absl::StatusOr<Tensor> got = file.Get("first");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Bytes(*got), Bytes(first[0].second));
  EXPECT_EQ(file.Find("old"), nullptr);
  EXPECT_EQ(ModeOf(real), 0600u);
  EXPECT_THAT(ListDir(dir + "/store/sub"), ElementsAre("model.safetensors"));
  EXPECT_THAT(ListDir(dir), ElementsAre("chain", "link", "store"));
  // A dangling link: the file it names is created.
  fs::create_symlink("store/fresh.safetensors", dir + "/dangling");
  ASSERT_TRUE(WriteSafetensors(dir + "/dangling", first).ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/dangling"));
  EXPECT_NE(SafetensorsFile::Open(dir + "/store/fresh.safetensors")->Find("first"), nullptr);
  // A loop of links is an error that names the path once.
  fs::create_symlink("loop_b", dir + "/loop_a");
  fs::create_symlink("loop_a", dir + "/loop_b");
  absl::Status loop = WriteSafetensors(dir + "/loop_a", first);
  EXPECT_EQ(loop.code(), absl::ErrnoToStatusCode(ELOOP));  // the errno's code
  EXPECT_THAT(loop.message(), HasSubstr("Too many levels of symbolic links"));
  EXPECT_EQ(CountOf(loop.message(), dir + "/loop_a"), 1) << loop.message();
}

// With follow_symlinks false the link itself is replaced by the new file and the file it
// pointed at keeps its bytes (what sdrt gather needs: OUT may not write into an input).
TEST(SafetensorsWriter, NotFollowingReplacesTheLinkAndLeavesItsTargetAlone) {
  const std::string dir = TestDir();
  const std::string input = dir + "/input.safetensors";
  ASSERT_TRUE(WriteSafetensors(input, NamedTensors{{"in", HashBytes({4}, DType::kInt8, 3)}}).ok());
  const std::string before = ReadAll(input);
  fs::create_symlink("input.safetensors", dir + "/out.safetensors");
  WriteSafetensorsOptions options;
  options.follow_symlinks = false;
  const NamedTensors out = {{"out", HashBytes({2}, DType::kFloat32, 4)}};
  ASSERT_TRUE(WriteSafetensors(dir + "/out.safetensors", out, {}, options).ok());
  EXPECT_FALSE(fs::is_symlink(dir + "/out.safetensors"));
  EXPECT_EQ(ReadAll(input), before);
  SafetensorsFile file = *SafetensorsFile::Open(dir + "/out.safetensors");
  absl::StatusOr<Tensor> got = file.Get("out");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Bytes(*got), Bytes(out[0].second));
  EXPECT_THAT(ListDir(dir), ElementsAre("input.safetensors", "out.safetensors"));
}

}  // namespace
}  // namespace sdrt
