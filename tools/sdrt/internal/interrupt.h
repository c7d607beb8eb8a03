// An interrupted `sdrt` command (SIGINT, SIGTERM, SIGHUP) removes the temporary files and
// folders it was writing and exits with code 1, never by the signal: outputs are written
// atomically (core/io/atomic_file.h), so the target is the old content or absent, and
// nothing of the half-written one is left. SIGKILL cannot be caught: what it leaves is
// removed by the next run writing the same target (AtomicFile / AtomicFolder::Create).
#ifndef SDRT_TOOLS_SDRT_INTERNAL_INTERRUPT_H_
#define SDRT_TOOLS_SDRT_INTERNAL_INTERRUPT_H_

namespace sdrt::cli {

// Installs handlers for SIGINT, SIGTERM and SIGHUP that wake a watcher thread (through a
// pipe: the handler only write(2)s one byte), which calls RemoveTemporaryPaths, prints
// "sdrt: interrupted by <signal>; removed N temporary path(s)" on stderr when it removed
// any, and ends the process with _exit(1). Call once, first thing in main, before any
// temporary path exists. Without a pipe (out of descriptors) the signals keep their
// default action. SIGBUS, which reading a mapped input raises when another program
// truncates the file meanwhile, takes the same way out with a line saying so (exit 1,
// temporary paths removed), instead of ending the process by the signal.
void InstallInterruptCleanup();

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_INTERRUPT_H_
