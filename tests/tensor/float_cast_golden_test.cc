// sdrt's float conversions (tensor/internal/float_cast.h) against PyTorch's `Tensor.to()`:
// tests/data/float_cast/expected.json, written by tests/golden/make_float_cast_golden.py.
// Every narrowing of every input must give PyTorch's code bit for bit and every widening
// PyTorch's float32 bits, except that a NaN need only be a NaN (PyTorch's NaN bits differ by
// format and CPU path; the golden file writes every widened NaN as 0x7fc00000).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tests/support/golden_codec.h"
#include "xxhash.h"

namespace sdrt {
namespace {

using internal::FloatBits;
using internal::FloatFromBits;

uint32_t Hex(const nlohmann::json& j) { return static_cast<uint32_t>(std::stoul(j.get<std::string>(), nullptr, 16)); }

// One narrow format: its name in the golden file, its width and its two conversions.
struct Format {
  const char* name;
  int width;
  uint32_t (*narrow)(float);
  float (*widen)(uint32_t);
  bool is_nan_code(uint32_t code) const { return std::isnan(widen(code)); }
};

const Format kFormats[] = {
    {"bfloat16", 16, [](float f) -> uint32_t { return internal::FloatToBFloat16(f); },
     [](uint32_t c) { return internal::BFloat16ToFloat(static_cast<uint16_t>(c)); }},
    {"float16", 16, [](float f) -> uint32_t { return internal::FloatToFloat16(f); },
     [](uint32_t c) { return internal::Float16ToFloat(static_cast<uint16_t>(c)); }},
    {"float8_e4m3fn", 8, [](float f) -> uint32_t { return internal::FloatToFloat8E4M3FN(f); },
     [](uint32_t c) { return internal::Float8E4M3FNToFloat(static_cast<uint8_t>(c)); }},
    {"float8_e5m2", 8, [](float f) -> uint32_t { return internal::FloatToFloat8E5M2(f); },
     [](uint32_t c) { return internal::Float8E5M2ToFloat(static_cast<uint8_t>(c)); }},
    {"float8_e8m0fnu", 8, [](float f) -> uint32_t { return internal::FloatToFloat8E8M0FNU(f); },
     [](uint32_t c) { return internal::Float8E8M0FNUToFloat(static_cast<uint8_t>(c)); }},
};

class FloatCastGolden : public ::testing::TestWithParam<Format> {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<nlohmann::json> doc = testing_golden::ReadGoldenJson("float_cast/expected.json");
    ASSERT_TRUE(doc.ok()) << doc.status();
    golden_ = new nlohmann::json(*std::move(doc));
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
  }
  static const nlohmann::json* golden_;
};
const nlohmann::json* FloatCastGolden::golden_ = nullptr;

TEST_P(FloatCastGolden, NarrowsEveryInputAsPyTorch) {
  const Format& format = GetParam();
  ASSERT_NE(golden_, nullptr);
  const nlohmann::json& inputs = golden_->at("inputs");
  const nlohmann::json& expected = golden_->at("narrow").at(format.name);
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GT(inputs.size(), 4000u);
  int wrong = 0;
  for (size_t i = 0; i < inputs.size() && wrong < 10; ++i) {
    const uint32_t in = Hex(inputs[i]);
    const uint32_t want = Hex(expected[i]);
    const uint32_t got = format.narrow(FloatFromBits(in));
    const bool ok = got == want || (format.is_nan_code(want) && format.is_nan_code(got));
    if (!ok) {
      ++wrong;
      ADD_FAILURE() << format.name << " of float32 bits " << std::hex << in << " ("
                    << FloatFromBits(in) << "): sdrt " << got << ", PyTorch " << want;
    }
  }
}

// The float32 bits of `f`, every NaN as 0x7fc00000 (as the golden file writes them).
uint32_t CanonicalBits(float f) { return std::isnan(f) ? 0x7fc00000u : FloatBits(f); }

TEST_P(FloatCastGolden, WidensEveryCodeAsPyTorch) {
  const Format& format = GetParam();
  ASSERT_NE(golden_, nullptr);
  const nlohmann::json& expected = golden_->at("widen").at(format.name);
  if (format.width == 8) {
    const nlohmann::json& all = expected.at("all");
    ASSERT_EQ(all.size(), 256u);
    for (uint32_t code = 0; code < 256; ++code) {
      EXPECT_EQ(CanonicalBits(format.widen(code)), Hex(all[code]))
          << format.name << " code " << std::hex << code;
    }
    return;
  }
  std::vector<uint32_t> widened(65536);
  for (uint32_t code = 0; code < 65536; ++code) widened[code] = CanonicalBits(format.widen(code));
  const nlohmann::json& rows = expected.at("rows");
  ASSERT_EQ(rows.size(), 256u);
  for (uint32_t row = 0; row < 256; ++row) {
    EXPECT_EQ(widened[row * 256], Hex(rows[row])) << format.name << " code " << std::hex
                                                  << row * 256;
  }
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx",
                static_cast<unsigned long long>(
                    XXH64(widened.data(), widened.size() * sizeof(uint32_t), 0)));
  EXPECT_EQ(std::string(digest), expected.at("xxh64").get<std::string>()) << format.name;
}

INSTANTIATE_TEST_SUITE_P(Formats, FloatCastGolden, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<Format>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == '_') c = 'x';
                           }
                           return name;
                         });

// float64 to every float dtype through ConvertFloats (the transfer engine's host path):
// PyTorch's codes, which go through float32 (two roundings where a float64 lies beside a
// tie of the narrow format that float32 rounds onto).
TEST(FloatCast, Float64NarrowsAsPyTorch) {
  absl::StatusOr<nlohmann::json> doc = testing_golden::ReadGoldenJson("float_cast/expected.json");
  ASSERT_TRUE(doc.ok()) << doc.status();
  const nlohmann::json& inputs = doc->at("inputs_f64");
  ASSERT_GT(inputs.size(), 4000u);
  std::vector<uint64_t> in(inputs.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = std::stoull(inputs[i].get<std::string>(), nullptr, 16);
  }
  int formats = 0;
  for (const auto& [name, codes] : doc->at("narrow_f64").items()) {
    absl::StatusOr<DType> dtype = DTypeFromName(name);
    ASSERT_TRUE(dtype.ok()) << name;
    ASSERT_EQ(codes.size(), in.size()) << name;
    const int bytes = ElementBits(*dtype) / 8;
    std::vector<unsigned char> out(in.size() * bytes);
    ASSERT_TRUE(internal::ConvertFloats(in.data(), DType::kFloat64, out.data(), *dtype,
                                        static_cast<int64_t>(in.size())));
    int wrong = 0;
    for (size_t i = 0; i < in.size() && wrong < 10; ++i) {
      uint32_t got = 0;
      std::memcpy(&got, out.data() + i * bytes, bytes);  // little-endian
      const uint32_t want = Hex(codes[i]);
      const auto widen = [&](uint32_t code) {
        uint32_t bits = code;
        float f = 0;
        EXPECT_TRUE(internal::ConvertFloats(&bits, *dtype, &f, DType::kFloat32, 1));
        return f;
      };
      if (got != want && !(std::isnan(widen(got)) && std::isnan(widen(want)))) {
        ++wrong;
        ADD_FAILURE() << name << " of float64 bits " << std::hex << in[i] << ": sdrt " << got
                      << ", PyTorch " << want;
      }
    }
    ++formats;
  }
  EXPECT_EQ(formats, 6);
}

// Every bfloat16 and float16 code widened to float64: exact (PyTorch's too).
TEST(FloatCast, WideningToFloat64IsExact) {
  for (const DType from : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<uint16_t> codes(65536);
    for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
    std::vector<double> wide(codes.size());
    std::vector<float> narrow(codes.size());
    ASSERT_TRUE(internal::ConvertFloats(codes.data(), from, wide.data(), DType::kFloat64, 65536));
    ASSERT_TRUE(internal::ConvertFloats(codes.data(), from, narrow.data(), DType::kFloat32, 65536));
    for (uint32_t c = 0; c < 65536; ++c) {
      if (std::isnan(narrow[c])) {
        EXPECT_TRUE(std::isnan(wide[c])) << c;
      } else {
        EXPECT_EQ(wide[c], static_cast<double>(narrow[c])) << DTypeName(from) << " " << c;
      }
    }
  }
}

// Cases named in float_cast.h, readable without the golden file.
TEST(FloatCast, OverflowAndTies) {
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(448.0f), 0x7e);
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(464.0f), 0x7e);   // a tie: to even, 448
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(465.0f), 0x7e);   // past it: saturated
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(-INFINITY), 0xfe);
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(internal::FloatToFloat8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(internal::FloatToFloat8E5M2(61440.0f), 0x7c);   // a tie, to even: infinity
  EXPECT_EQ(internal::FloatToFloat16(65519.0f), 0x7bff);
  EXPECT_EQ(internal::FloatToFloat16(65520.0f), 0x7c00);
  EXPECT_EQ(internal::FloatToFloat8E8M0FNU(1.5f), 128);      // a tie: 2^1
  EXPECT_EQ(internal::FloatToFloat8E8M0FNU(-0.75f), 127);    // the sign dropped: 2^0
  EXPECT_EQ(internal::Float8E8M0FNUToFloat(127), 1.0f);
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(FloatFromBits(0x3a800000u)), 0x00);  // 2^-10: tie to 0
  EXPECT_EQ(internal::FloatToFloat8E4M3FN(FloatFromBits(0x3a800001u)), 0x01);  // past: 2^-9
}

}  // namespace
}  // namespace sdrt
