// Helpers of the `sdrt shard --map` tests (shard_map_cli_test.cc, shard_megatron_cli_test.cc):
// shell quoting, a golden value as a tensor, the Hugging Face names of a Llama layer's
// tensors, Shard(0) pieces put together, a fixture with a fresh folder. Test code only.
#ifndef SDRT_TESTS_TOOLS_SHARD_MAP_CLI_UTIL_H_
#define SDRT_TESTS_TOOLS_SHARD_MAP_CLI_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt::test_shard_map {

inline std::string Quote(const std::string& s) { return test::ShellQuote(s); }

inline Tensor TensorOf(const nlohmann::json& j) {
  absl::StatusOr<Value> v = testing_golden::DecodeGoldenValue(j);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() && v->kind() == ValueKind::kTensor ? v->as_tensor() : Tensor();
}

inline std::string HfName(const std::string& key) {
  if (key == "embed_tokens") return "model.embed_tokens.weight";
  const bool attn = key == "q_proj" || key == "k_proj" || key == "v_proj" || key == "o_proj" ||
                    key == "qkv_proj";
  return absl::StrCat("model.layers.0.", attn ? "self_attn." : "mlp.", key, ".weight");
}

// The rows of `pieces` one after another (the full tensor a Shard(0) layout cuts).
inline Tensor Rows(const std::vector<Tensor>& pieces) {
  int64_t rows = 0;
  for (const Tensor& p : pieces) rows += p.shape()[0];
  IntVector shape = pieces[0].shape();
  shape[0] = rows;
  Tensor out = *Tensor::Empty(shape, pieces[0].dtype());
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    std::memcpy(static_cast<char*>(out.data_ptr()) + at, p.data_ptr(), p.nbytes());
    at += p.nbytes();
  }
  return out;
}

// A test with a fresh folder of its own (`dir_`, named after the suite and the process under
// the test root), removed after it.
class FreshDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(test::TestTmpRoot()) /
           absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name(),
                        "_", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

}  // namespace sdrt::test_shard_map

#endif  // SDRT_TESTS_TOOLS_SHARD_MAP_CLI_UTIL_H_
