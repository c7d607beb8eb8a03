#include "sdrt/tools/sdrt/internal/interrupt.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "sdrt/core/io/atomic_file.h"
#include "sdrt/tools/sdrt/commands.h"

namespace sdrt::cli {
namespace {

// How long a rank waits after a signal before it exits, when it is one of several (see
// Watch).
constexpr std::chrono::milliseconds kPeerGrace{500};
constexpr std::chrono::milliseconds kPoll{10};

// The pipe from the handlers to the watcher: [0] read end, [1] write end.
int g_wake[2] = {-1, -1};

// Async-signal-safe: one byte, the signal number, into the pipe.
void OnSignal(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] const ssize_t n = write(g_wake[1], &byte, 1);
  errno = saved_errno;
}

// SIGBUS: a mapped input file was cut short (truncated by another program while sdrt read
// it). The faulting thread cannot go on (returning would fault again): it hands the signal
// to the watcher and waits there for _exit.
void OnBusError(int signo, siginfo_t*, void*) {
  OnSignal(signo);
  for (;;) pause();
}

[[noreturn]] void Watch() {
  unsigned char signo = 0;
  while (read(g_wake[0], &signo, 1) != 1) {
    if (errno != EINTR) pause();  // the pipe failed: wait for the process to end otherwise
  }
  internal::RefuseNewTemporaryPaths();
  int removed = internal::RemoveTemporaryPaths();
  // Under mpiexec every rank gets the signal, and Hydra kills the others as soon as one
  // exits: every rank waits a little, so that another rank (busy in a large write on a
  // shared core, or rank 0 with the output's temporary folder that the others write into)
  // gets to remove its temporary paths before the first exit, and meanwhile removes what it
  // makes (a name it had registered but not yet made when the signal came). A rank that
  // removed something and exited at once left rank 0's folder, killed before its watcher
  // ran, in 11 of 70 interrupted 2-rank reshards (0 of 80 with the wait).
  const char* ranks = std::getenv("PMI_SIZE");
  const char* rank = std::getenv("PMI_RANK");
  const bool first_rank = rank == nullptr || std::strcmp(rank, "0") == 0;
  if (signo != SIGBUS && ranks != nullptr && std::strcmp(ranks, "1") != 0) {
    for (auto waited = std::chrono::milliseconds(0); waited < kPeerGrace; waited += kPoll) {
      std::this_thread::sleep_for(kPoll);
      removed += internal::RemoveTemporaryPaths();
    }
  }
  if (signo == SIGBUS) {
    std::fprintf(stderr,
                 "sdrt: an input file became shorter while it was read (SIGBUS: another "
                 "program truncated or replaced it); nothing was completed; removed %d "
                 "temporary path(s)\n",
                 removed);
  } else if (removed > 0 || first_rank) {
    // Every exit 1 says why, once: a rank that removed nothing is silent unless it is the
    // first (one process alone too: a command whose output was already in place, or that
    // writes none).
    std::fprintf(stderr, "sdrt: interrupted by %s; removed %d temporary path(s)\n",
                 strsignal(signo), removed);
  }
  _exit(kExitRuntimeError);
}

}  // namespace

void InstallInterruptCleanup() {
  if (pipe2(g_wake, O_CLOEXEC) != 0) return;
  // The watcher starts with the signals blocked (a thread inherits its creator's mask), so
  // none is handled on it: a SIGBUS sent with kill(2) would otherwise park it in
  // OnBusError, and the command would go on and end as if nothing had happened.
  sigset_t handled, previous;
  sigemptyset(&handled);
  for (const int signo : {SIGINT, SIGTERM, SIGHUP, SIGBUS}) sigaddset(&handled, signo);
  pthread_sigmask(SIG_BLOCK, &handled, &previous);
  std::thread(Watch).detach();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int signo : {SIGINT, SIGTERM, SIGHUP}) sigaction(signo, &action, nullptr);
  struct sigaction bus = {};
  bus.sa_sigaction = OnBusError;
  sigemptyset(&bus.sa_mask);
  bus.sa_flags = SA_SIGINFO;
  sigaction(SIGBUS, &bus, nullptr);
}

}  // namespace sdrt::cli
