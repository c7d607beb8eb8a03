// sdrt: the command line over the state-dict runtime. See `sdrt --help`.
#include <iostream>

#include "CLI/CLI.hpp"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/interrupt.h"
#include "sdrt/version.h"

namespace {

void PrintVersion() {
  std::cout << "sdrt " << sdrt::Version() << "\n"
            << "  " << sdrt::CudaVersionString() << ", " << sdrt::CudaDeviceCount()
            << " device(s)\n"
            << "  NCCL: " << (SDRT_CLI_HAVE_NCCL ? "found and linked" : "not found") << "\n"
            << "  MPI: " << (SDRT_CLI_HAVE_MPI ? "found" : "not found") << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  sdrt::cli::InstallInterruptCleanup();  // first: no temporary path exists yet
  CLI::App app("sdrt: gather, broadcast and inspect sharded model state dicts", "sdrt");
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "print the version and the CUDA/NCCL/MPI support");
  int exit_code = sdrt::cli::kExitOk;
  sdrt::cli::AddInspectCommand(app, &exit_code);
  sdrt::cli::AddShardCommand(app, &exit_code);
  sdrt::cli::AddMakeCommand(app, &exit_code);
#if SDRT_CLI_HAVE_DISTRIBUTED
  sdrt::cli::AddGatherCommand(app, &exit_code);
  sdrt::cli::AddLoadCommand(app, &exit_code);
#endif
  sdrt::cli::AddDemoCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : sdrt::cli::kExitBadInput;
  }
  if (version) {
    PrintVersion();
    return sdrt::cli::kExitOk;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << app.help();
    return sdrt::cli::kExitBadInput;
  }
  return exit_code;
}
