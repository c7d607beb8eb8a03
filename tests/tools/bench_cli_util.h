// What the `sdrt bench` tests share: the command under mpiexec and its JSON rows.
#ifndef SDRT_TESTS_TOOLS_BENCH_CLI_UTIL_H_
#define SDRT_TESTS_TOOLS_BENCH_CLI_UTIL_H_

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt::test {

// `sdrt bench ARGS` on `ranks` ranks.
inline CommandResult Bench(int ranks, const std::string& args) {
  return RunSdrtMpi(ranks, "bench " + args);
}

// The rows of a `--json` run (an empty list, and a failure, when stdout is not a list).
inline nlohmann::json ParseRows(const CommandResult& r) {
  nlohmann::json rows = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(rows.is_array()) << r.out << r.err;
  return rows.is_array() ? rows : nlohmann::json::array();
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_TOOLS_BENCH_CLI_UTIL_H_
