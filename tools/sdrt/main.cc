// sdrt: the command line over the state-dict runtime. See `sdrt --help`.
#include <csignal>
#include <iostream>
#include <new>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/interrupt.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/runner.h"
#include "sdrt/version.h"

namespace {

void PrintVersion() {
  std::cout << "sdrt " << sdrt::Version() << "\n"
            << "  " << sdrt::CudaVersionString() << ", " << sdrt::CudaDeviceCount()
            << " device(s)\n"
            << "  NCCL: " << (SDRT_CLI_HAVE_NCCL ? "found and linked" : "not found") << "\n"
            << "  MPI: " << (SDRT_CLI_HAVE_MPI ? "found" : "not found") << "\n";
}

// The rank whose output a command shows: the launcher's for the commands that run as one
// job under mpiexec (IsMultiRankCommand) and with no command, so that they print once; 0 for
// the others, which are whole programs in every process that runs them (each prints its own
// errors).
int PrintingRank(const std::string& command, int launcher_rank) {
  return sdrt::cli::IsMultiRankCommand(command) || command.empty() ? launcher_rank : 0;
}

// What CLI11 threw: --help prints the help on stdout (exit 0); an error is one line on
// stderr naming the command and how to get its help (exit 2). Under mpiexec only rank 0
// prints (docs/CLI.md, "Exit codes"); every rank exits alike.
int ParseFailed(const CLI::App& app, const CLI::ParseError& e, int launcher_rank) {
  std::string command;
  for (const CLI::App* sub : app.get_subcommands()) command = sub->get_name();
  const int rank = PrintingRank(command, launcher_rank);
  if (e.get_exit_code() == 0) {
    std::ostream none(nullptr);
    app.exit(e, rank == 0 ? std::cout : none, rank == 0 ? std::cerr : none);
    return sdrt::cli::kExitOk;
  }
  std::string message =
      absl::StrCat(e.what(), " (see `sdrt ", command, command.empty() ? "" : " ", "--help`)");
  if (dynamic_cast<const CLI::ExcludesError*>(&e) != nullptr) {
    message =
        absl::StrCat("--version takes no command (run `sdrt --version` alone), got ", command);
  }
  return sdrt::cli::ReportError(command, absl::InvalidArgumentError(message), rank);
}

// `exit_code`, unless what was printed on stdout did not all get out (a closed pipe, a full
// disk): then one line on stderr and 1, so that output lost is never success.
int CheckedExit(int exit_code) {
  std::cout.flush();
  if (std::cout.good()) return exit_code;
  sdrt::cli::WriteStderrLine(
      "sdrt: standard output could not be written (a closed pipe or a full disk)");
  return sdrt::cli::kExitRuntimeError;
}

// A command that ran out of memory: one line on stderr, exit 1 (docs/CLI.md, "Exit codes").
int OutOfMemory(const CLI::App& app, int launcher_rank) {
  std::string command;
  for (const CLI::App* sub : app.get_subcommands()) command = sub->get_name();
  return sdrt::cli::ReportError(
      command, absl::ResourceExhaustedError("out of memory (an allocation failed)"),
      PrintingRank(command, launcher_rank));
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe on stdout (`sdrt inspect F | head -1`) is an error from write(2), reported
  // by CheckedExit, not a SIGPIPE that kills the process.
  std::signal(SIGPIPE, SIG_IGN);
  sdrt::cli::InstallInterruptCleanup();  // first: no temporary path exists yet
  CLI::App app("sdrt: gather, broadcast and inspect sharded model state dicts", "sdrt");
  app.require_subcommand(0, 1);
  bool version = false;
  CLI::Option* version_flag =
      app.add_flag("--version", version, "print the version and the CUDA/NCCL/MPI support");
  int exit_code = sdrt::cli::kExitOk;
  sdrt::cli::AddInspectCommand(app, &exit_code);
  sdrt::cli::AddShardCommand(app, &exit_code);
  sdrt::cli::AddMakeCommand(app, &exit_code);
  sdrt::cli::AddGatherCommand(app, &exit_code);
  sdrt::cli::AddLoadCommand(app, &exit_code);
  sdrt::cli::AddReshardCommand(app, &exit_code);
  sdrt::cli::AddSimulateCommand(app, &exit_code);
  sdrt::cli::AddDemoCommand(app, &exit_code);
  sdrt::cli::AddBenchCommand(app, &exit_code);
  // `sdrt --version CMD` is refused (exit 2) before CMD runs: CLI11 checks exclusions
  // before it runs any command's callback.
  for (CLI::App* command : app.get_subcommands({})) command->excludes(version_flag);
  const int rank = sdrt::cli::LauncherRank();  // MPI has not started: its launcher's rank
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ParseFailed(app, e, rank);
  } catch (const std::bad_alloc&) {
    // Memory ran out inside a command (a cap, or overcommit off): a runtime failure, exit 1,
    // not the abort of an exception nobody catches. What the command made is cleaned up as
    // the exception leaves it.
    return OutOfMemory(app, rank);
  }
  if (version) {
    PrintVersion();
    return CheckedExit(sdrt::cli::kExitOk);
  }
  if (app.get_subcommands().empty()) {
    std::string names;
    for (const CLI::App* command : app.get_subcommands({})) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", command->get_name());
    }
    return sdrt::cli::ReportError("",
                                  absl::InvalidArgumentError(absl::StrCat(
                                      "a command is required: ", names, " (see `sdrt --help`)")),
                                  rank);
  }
  return CheckedExit(exit_code);
}
