// Builders of Hugging Face checkpoint folders for the tests (checkpoint_source_test.cc,
// tests/tools/hf_source_cli_test.cc), written with sdrt's own safetensors writer in the
// layout huggingface_hub writes: model-0000i-of-0000N.safetensors and
// model.safetensors.index.json with metadata.total_size and a weight_map sorted by name.
// Header-only; test code only.
#ifndef SDRT_TESTS_CORE_CHECKPOINT_CHECKPOINT_SOURCE_TEST_UTIL_H_
#define SDRT_TESTS_CORE_CHECKPOINT_CHECKPOINT_SOURCE_TEST_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::test {

// "model-00002-of-00003.safetensors" for i = 1, n = 3.
inline std::string HfShardName(int i, int n) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i + 1, n);
  return name;
}

// Replaces `dir` by a Hugging Face folder of `tensors` in `n` files: tensor k goes to file
// k * n / size (consecutive runs), every file with __metadata__ {"format": "pt"}, the files
// after the first with `later_metadata` instead when it is not empty.
inline void WriteHfFolder(const std::string& dir,
                          const std::vector<std::pair<std::string, Tensor>>& tensors, int n,
                          const std::map<std::string, std::string>& later_metadata = {}) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::vector<std::pair<std::string, Tensor>>> files(static_cast<size_t>(n));
  nlohmann::ordered_json index;
  std::map<std::string, std::string> weight_map;
  int64_t total = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const size_t f = k * static_cast<size_t>(n) / tensors.size();
    files[f].push_back(tensors[k]);
    weight_map[tensors[k].first] = HfShardName(static_cast<int>(f), n);
    total += tensors[k].second.nbytes();
  }
  for (int f = 0; f < n; ++f) {
    const std::map<std::string, std::string> meta =
        f > 0 && !later_metadata.empty() ? later_metadata
                                         : std::map<std::string, std::string>{{"format", "pt"}};
    const absl::Status written =
        WriteSafetensors(dir + "/" + HfShardName(f, n), files[static_cast<size_t>(f)], meta);
    ASSERT_TRUE(written.ok()) << written;
  }
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2) << "\n";
}

inline nlohmann::ordered_json ReadHfIndex(const std::string& dir) {
  std::ifstream in(dir + "/model.safetensors.index.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::ordered_json::parse(text.str());
}

inline void WriteHfIndex(const std::string& dir, const nlohmann::ordered_json& index) {
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << index.dump(2) << "\n";
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_CHECKPOINT_CHECKPOINT_SOURCE_TEST_UTIL_H_
