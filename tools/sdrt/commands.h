// The subcommands of the `sdrt` tool. Each Add*Command registers its options on the
// CLI11 app and the code to run; a command's result is its process exit code:
// 0 success, 2 bad input (unreadable or malformed files, bad arguments), 1 runtime failure.
#ifndef SDRT_TOOLS_SDRT_COMMANDS_H_
#define SDRT_TOOLS_SDRT_COMMANDS_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace sdrt::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;
inline constexpr int kExitBadInput = 2;

// Registers a subcommand whose action sets *exit_code when the app runs it.
void AddInspectCommand(CLI::App& app, int* exit_code);
void AddShardCommand(CLI::App& app, int* exit_code);
void AddMakeCommand(CLI::App& app, int* exit_code);
void AddDemoCommand(CLI::App& app, int* exit_code);
// `sdrt bench`; in a build without MPI a command that says it needs MPI (exit 2).
void AddBenchCommand(CLI::App& app, int* exit_code);
void AddGatherCommand(CLI::App& app, int* exit_code);
void AddLoadCommand(CLI::App& app, int* exit_code);
void AddReshardCommand(CLI::App& app, int* exit_code);
// `sdrt simulate`: a whole world's reshard plan in one process (one process, no MPI).
void AddSimulateCommand(CLI::App& app, int* exit_code);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_COMMANDS_H_
