// Tests of the safetensors header parser, through SafetensorsFile::FromBuffer: what
// safetensors 0.8.0 loads and sdrt must too, NUL bytes and trailing characters, dtypes the
// official package writes that sdrt does not support, and the cost of a 100,000-tensor header;
// and the UTF-8 validator the parser and writer use.
#include "sdrt/core/io/internal/safetensors_header.h"

#include <chrono>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Image;
using ::sdrt::test::Parse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kW = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kEight(8, '\x01');

// Each of these headers is loaded by safetensors 0.8.0 (checked by hand with safe_open).
TEST(SafetensorsHeader, AcceptsWhatTheReferenceLoads) {
  const std::string deep_127 =  // root > entry > 125 nested arrays: 127 levels
      std::string(125, '[') + std::string(125, ']');
  const std::pair<const char*, std::string> cases[] = {
      {"unknown field", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})"},
      {"unknown nested field",
       R"({"w":{"x":{"a":[1,{"b":null}]},"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"},
      {"unknown field 127 levels deep",
       R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":)" + deep_127 + "}}"},
      {"null metadata", R"({"__metadata__":null,)" + kW + "}"},
      {"leading whitespace", " \n\t\r{" + kW + "}"},
      {"trailing whitespace", "{" + kW + "} \n\t\r   "},
  };
  for (const auto& [what, header] : cases) {
    absl::StatusOr<SafetensorsFile> file = Parse(Image(header, kEight));
    ASSERT_TRUE(file.ok()) << what << ": " << file.status();
    ASSERT_EQ(file->entries().size(), 1u) << what;
    const SafetensorsEntry& e = file->entries()[0];
    EXPECT_EQ(e.name, "w");
    EXPECT_EQ(e.dtype, DType::kFloat32);
    EXPECT_THAT(e.shape, ElementsAre(2));
    EXPECT_EQ(e.data_begin, 0);
    EXPECT_EQ(e.data_end, 8);
    EXPECT_TRUE(file->metadata().empty()) << what;
    EXPECT_EQ(file->header_size(), static_cast<int64_t>(header.size()));
  }
}

TEST(SafetensorsHeader, RejectsNulBytesAndTrailingCharacters) {
  const std::string object = "{" + kW + "}";  // 54 bytes
  ASSERT_EQ(object.size(), 54u);
  const std::pair<std::string, std::string> cases[] = {
      {object + std::string("\0 garbage {{{", 13),
       "safetensors header: NUL byte at byte 54 (a header is JSON text and padding spaces)"},
      {object + std::string("   \0", 4), "NUL byte at byte 57"},
      {std::string("{\"w\0\":1}", 8), "NUL byte at byte 3"},
      {object + "x", "safetensors header: trailing characters after the JSON object at byte 54"},
      {object + "  \n {}", "trailing characters after the JSON object at byte 58"},
      {object + "]", "trailing characters after the JSON object at byte 54"},
      {" " + object + " \"}\"", "trailing characters after the JSON object at byte 56"},
  };
  for (const auto& [header, message] : cases) {
    absl::StatusOr<SafetensorsFile> file = Parse(Image(header, kEight));
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << header;
    EXPECT_THAT(file.status().message(), HasSubstr(message)) << header;
  }
}

TEST(SafetensorsHeader, EveryDTypeOfSafetensors080IsReadWithItsSizeInBits) {
  // (code, shape, bytes): sizes as the reference computes them, in bits for F4 and F6; the
  // shape counts elements.
  const std::tuple<const char*, const char*, int, DType> cases[] = {
      {"U16", "[3]", 6, DType::kUInt16},
      {"U32", "[3]", 12, DType::kUInt32},
      {"U64", "[3]", 24, DType::kUInt64},
      {"C64", "[3]", 24, DType::kComplex64},
      {"F8_E8M0", "[3]", 3, DType::kFloat8E8M0FNU},
      {"F8_E4M3FNUZ", "[3]", 3, DType::kFloat8E4M3FNUZ},
      {"F8_E5M2FNUZ", "[3]", 3, DType::kFloat8E5M2FNUZ},
      {"F4", "[2, 3]", 3, DType::kFloat4E2M1FNx2},
      {"F6_E2M3", "[4]", 3, DType::kFloat6E2M3FN},
      {"F6_E3M2", "[8]", 6, DType::kFloat6E3M2FN},
  };
  for (const auto& [code, shape, bytes, dtype] : cases) {
    const std::string header = absl::StrCat(
        R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)", R"("scale":{"dtype":")", code,
        R"(","shape":)", shape, R"(,"data_offsets":[1,)", 1 + bytes, "]}}");
    absl::StatusOr<SafetensorsFile> file = Parse(Image(header, std::string(1 + bytes, 'x')));
    ASSERT_TRUE(file.ok()) << code << ": " << file.status();
    EXPECT_EQ(file->Find("scale")->dtype, dtype) << code;
    absl::StatusOr<Tensor> t = file->Get("scale");
    ASSERT_TRUE(t.ok()) << code << ": " << t.status();
    EXPECT_EQ(t->nbytes(), bytes) << code;
    EXPECT_EQ(std::string(static_cast<const char*>(t->data_ptr()), bytes), std::string(bytes, 'x'));
  }
  absl::StatusOr<SafetensorsFile> short_data =
      Parse(Image(R"({"s":{"dtype":"U16","shape":[3],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_EQ(short_data.status().code(), absl::StatusCode::kInvalidArgument) << short_data.status();
  EXPECT_THAT(short_data.status().message(),
              HasSubstr("tensor \"s\": data_offsets [0, 4] span 4 bytes but U16[3] needs 6"));
  absl::StatusOr<SafetensorsFile> odd_bits =
      Parse(Image(R"({"s":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "ab"));
  EXPECT_EQ(odd_bits.status().code(), absl::StatusCode::kInvalidArgument) << odd_bits.status();
  EXPECT_THAT(odd_bits.status().message(),
              HasSubstr("tensor \"s\": F4[3]: 3 elements of float4_e2m1fn_x2 (4 bits each) are "
                        "12 bits, not a whole number of bytes"));
  // A code no safetensors version defines is unknown.
  for (const char* code : {"XYZ", "F3", "Q4_K"}) {
    absl::StatusOr<SafetensorsFile> unknown = Parse(Image(
        absl::StrCat(R"({"s":{"dtype":")", code, R"(","shape":[1],"data_offsets":[0,1]}})"), "a"));
    EXPECT_THAT(unknown.status().message(),
                HasSubstr(absl::StrCat("tensor \"s\": unknown dtype \"", code,
                                       "\" (not a safetensors dtype)")));
  }
}

// Parsing was quadratic in the tensor count (ordered_json's linear key lookup: 100,000
// tensors took 7.8 s). GoogleTest has no timeout; this must simply be fast.
TEST(SafetensorsHeader, HundredThousandTensorsParseQuickly) {
  constexpr int kTensors = 100'000;
  std::vector<SafetensorsEntry> entries;
  entries.reserve(kTensors);
  for (int i = 0; i < kTensors; ++i) {
    SafetensorsEntry& e = entries.emplace_back();
    // Names out of alphabetical order, so that no map's insertion order helps.
    e.name = absl::StrCat("layers.", (i * int64_t{7919}) % kTensors, ".weight");
    e.dtype = DType::kUInt8;
    e.shape = {1};
    e.data_begin = i;
    e.data_end = i + 1;
  }
  absl::StatusOr<std::string> header = internal::SerializeSafetensorsHeader(entries, {});
  ASSERT_TRUE(header.ok()) << header.status();
  const std::string image = Image(*header, std::string(kTensors, '\x05'));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<SafetensorsFile> file = Parse(image);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "parsed " << kTensors << " tensors (" << header->size() << "-byte header) in "
            << seconds << " s\n";
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(file->entries()[12345].name, entries[12345].name);  // sorted by offset
  const SafetensorsEntry* last =
      file->Find(absl::StrCat("layers.", (99'999 * int64_t{7919}) % kTensors, ".weight"));
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->data_begin, 99'999);
  EXPECT_EQ(*file->Get(last->name)->data<uint8_t>(), 5);
}

// Duplicate keys stay an error at every level, even where the reference keeps the last.
TEST(SafetensorsHeader, DuplicateKeysAreRejectedAtEveryLevel) {
  const std::pair<std::string, std::string> cases[] = {
      {"{" + kW + "," + kW + "}", "duplicate key \"w\""},
      {R"({"__metadata__":{"a":"b","a":"c"},)" + kW + "}", "duplicate key \"a\""},
      {R"({"w":{"x":{"k":1,"k":2},"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       "duplicate key \"k\""},
  };
  for (const auto& [header, message] : cases) {
    absl::StatusOr<SafetensorsFile> file = Parse(Image(header, kEight + kEight));
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << header;
    EXPECT_THAT(file.status().message(), HasSubstr(message)) << header;
  }
}

// A name holding a NUL byte ("\u0000" is valid JSON) is refused: a C caller (the C API,
// the Python module) would see it cut there, and two names could then read alike.
TEST(SafetensorsHeader, ANameWithANulByteIsRefused) {
  absl::StatusOr<SafetensorsFile> file =
      Parse(Image(R"({"w\u0000x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kEight));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("its name holds a NUL byte"));
}

// A header-only description (`sdrt make --header-only`: the marker, no data) is checked
// against the data region it describes; one that breaks a rule as a description is refused
// for that rule, not for the data region it lacks.
TEST(SafetensorsHeader, ABrokenHeaderOnlyDescriptionSaysWhatIsBroken) {
  const std::string marker = R"("__metadata__":{"sdrt.header_only":"true"})";
  const std::string a = R"("a":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]})";
  absl::StatusOr<SafetensorsFile> whole =
      Parse(Image("{" + marker + "," + a + R"(,"b":{"dtype":"BF16","shape":[4,4],)" +
                  R"("data_offsets":[32,64]}})"));
  ASSERT_FALSE(whole.ok());
  EXPECT_THAT(whole.status().message(), HasSubstr("has no tensor bytes"));
  // The second tensor's shape no longer matches its offsets.
  absl::StatusOr<SafetensorsFile> broken =
      Parse(Image("{" + marker + "," + a + R"(,"b":{"dtype":"BF16","shape":[4,8],)" +
                  R"("data_offsets":[32,64]}})"));
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.status().message(), HasSubstr("a header-only description"));
  EXPECT_THAT(broken.status().message(), HasSubstr("tensor \"b\""));
  EXPECT_THAT(broken.status().message(), HasSubstr("needs 64"));
  // Without the marker the same header is a file whose data region is missing.
  absl::StatusOr<SafetensorsFile> unmarked =
      Parse(Image("{" + a + R"(,"b":{"dtype":"BF16","shape":[4,8],"data_offsets":[32,64]}})"));
  ASSERT_FALSE(unmarked.ok());
  EXPECT_THAT(unmarked.status().message(), Not(HasSubstr("header-only")));
}

TEST(SafetensorsHeader, Utf8ValidatorFollowsTheUnicodeTable) {
  for (const char* good : {"", "ascii", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9d\x84\x9e",
                           "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(internal::ValidateUtf8(good, "s").ok()) << good;
  }
  for (const char* bad :
       {"\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xf0\x8f\xbf\xbf",
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe2\x82", "a\xc3(", "\xfe"}) {
    const absl::Status s = internal::ValidateUtf8(bad, "s");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << absl::CHexEscape(bad);
    EXPECT_THAT(s.message(), HasSubstr("is not valid UTF-8 at byte"));
  }
}

}  // namespace
}  // namespace sdrt
