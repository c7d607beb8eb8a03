// Printing helpers shared by the subcommands: error lines, aligned text tables, byte
// counts, wall time and progress lines.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_H_
#define SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace sdrt::cli {

// The exit code for a failed Status: 2 (bad input) for InvalidArgument, NotFound,
// AlreadyExists, FailedPrecondition and OutOfRange, which the user's files or arguments
// cause; 1 (runtime failure) for everything else (I/O errors, memory, internal errors).
int ExitCodeFor(const absl::Status& status);

// The one rule for an input that cannot be opened (CheckpointSource::Open,
// DetectCheckpointKind, SafetensorsFile::Open, for every command): bad input, exit 2,
// whatever code errno gave it (a link loop is ELOOP, which absl calls Unknown; a file that
// may not be read; a missing one), except the machine's failures, which stay 1: out of
// memory (ResourceExhausted) and Internal. `status` as InvalidArgument with its message,
// or as it is.
absl::Status InputError(const absl::Status& status);

// `json` as text for --json output, indented by `indent` spaces, non-ASCII kept: a string
// that is not valid UTF-8 (a path or tensor name from the user) is written with U+FFFD in
// place of its bad bytes instead of throwing. Every --json output goes through here.
std::string JsonText(const nlohmann::ordered_json& json, int indent);

// "[2, 3]".
std::string ShapeText(const std::vector<int64_t>& shape);

// "90.86 MB" (decimal units, as file sizes are usually quoted), "512 B".
std::string HumanBytes(int64_t bytes);
// "22,713,728".
std::string WithThousands(int64_t value);
// "1 tensor", "21 tensors", "69,975 tensors": `n` (WithThousands) and `noun`, plural
// unless n is 1.
std::string Counted(int64_t n, absl::string_view noun);

// The rank the MPI launcher gave this process, read from its environment before MPI starts:
// PMI_RANK (MPICH, Intel MPI), OMPI_COMM_WORLD_RANK (Open MPI), PMIX_RANK, else
// MPI_LOCALRANKID (the node-local rank); 0 when none is set (not started by mpiexec).
int LauncherRank();

// Writes `line` and a newline to stderr in one write(2) (looping only on a short write or
// EINTR), so that lines of ranks sharing one stderr under mpiexec never interleave inside a
// line, as they can when an unbuffered stream writes a line in several pieces.
void WriteStderrLine(absl::string_view line);

// Prints "sdrt <command>: <message>" (the message through Printable) as one line on
// stderr when `rank` is 0, and returns ExitCodeFor(status). Every error the `sdrt` commands
// print goes through here, so that gather and load print each once under mpiexec (they
// pass the session's rank, or LauncherRank() before the session starts; the single-process
// commands pass 0) and no control character of a path or tensor name echoed in a message
// reaches the terminal. `command` is "load", "shard", ... ("" for
// the top level: "sdrt: <message>").
// Messages longer than kMaxErrorBytes (after escaping) are cut there, with their length.
inline constexpr size_t kMaxErrorBytes = 2000;
int ReportError(absl::string_view command, const absl::Status& status, int rank);

// `text` with every control character written as an escape, so that names from a file or
// the command line cannot break, move or colour the terminal output: C0 controls (newline,
// ESC, NUL, ...) and DEL as "\x1b", C1 controls (U+0080..U+009F, UTF-8 "\xc2\x9b") as
// "\u009b", and bytes that are not valid UTF-8 as "\xff". Other UTF-8 text is unchanged.
std::string Printable(absl::string_view text);
// The longest prefix of `text` of at most `max_bytes` that does not split a UTF-8 character.
std::string Utf8Prefix(const std::string& text, size_t max_bytes);

// A text table: columns are padded to their widest cell; `right_aligned[i]` right-aligns
// column i (numbers). Rows shorter than the header are padded with empty cells.
class Table {
 public:
  Table(std::vector<std::string> header, std::vector<bool> right_aligned);
  void AddRow(std::vector<std::string> row);
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_aligned_;
  std::vector<std::vector<std::string>> rows_;
};

// Seconds on a monotonic clock.
double NowSeconds();

// A progress callback for GatherOptions/BroadcastOptions::progress on stderr ("gather:
// 1.2 GB of 3.4 GB, 2.10 GB/s"). On a terminal it rewrites one line and ends it when done;
// with `force` (--progress) and stderr not a terminal (a file, or any rank's stderr under
// mpiexec) it writes whole lines, at most one a second plus the last. An empty function
// unless `enabled` and stderr is a terminal or `force`.
std::function<void(int64_t, int64_t)> ProgressLine(const std::string& what, bool enabled,
                                                   bool force = false);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_H_
