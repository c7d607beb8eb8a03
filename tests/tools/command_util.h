// Running a command line from the CLI tests (test-only, header-only): its exit code,
// standard output and standard error, captured separately.
#ifndef SDRT_TESTS_TOOLS_COMMAND_UTIL_H_
#define SDRT_TESTS_TOOLS_COMMAND_UTIL_H_

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command could not run or died from a signal
  std::string out;     // standard output
  std::string err;     // standard error
  std::string all() const { return out + err; }
};

// `s` quoted for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs `command` with /bin/sh; stderr goes through a file under TestTmpRoot().
inline CommandResult RunCommand(const std::string& command) {
  static std::atomic<int> counter{0};
  const std::string err_path = (std::filesystem::path(TestTmpRoot()) /
                                absl::StrCat("command_stderr_", getpid(), "_", counter++))
                                   .string();
  CommandResult result;
  FILE* pipe = popen((command + " 2>" + ShellQuote(err_path)).c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  result.err = text.str();
  std::filesystem::remove(err_path);
  return result;
}

// The bytes of the file at `path` ("" when it cannot be read).
inline std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

#if defined(SDRT_BINARY)
// The built `sdrt` (the target's SDRT_BINARY) with `args`, within 120 seconds.
inline CommandResult RunSdrt(const std::string& args) {
  return RunCommand("timeout 120 " + ShellQuote(SDRT_BINARY) + " " + args);
}
#endif

#if defined(SDRT_BINARY) && defined(SDRT_MPIEXEC) && defined(SDRT_MPIEXEC_NUMPROC_FLAG)
// `sdrt args` under `mpiexec -n ranks` (the target's SDRT_MPIEXEC), within 300 seconds.
inline CommandResult RunSdrtMpi(int ranks, const std::string& args) {
  return RunCommand(absl::StrCat("timeout 300 ", ShellQuote(SDRT_MPIEXEC), " ",
                                 SDRT_MPIEXEC_NUMPROC_FLAG, " ", ranks, " ",
                                 ShellQuote(SDRT_BINARY), " ", args));
}
#endif

}  // namespace sdrt::test

#endif  // SDRT_TESTS_TOOLS_COMMAND_UTIL_H_
