// Printing helpers shared by the subcommands: aligned text tables, byte counts, wall time
// and progress lines.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_H_
#define SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sdrt::cli {

// The exit code for a failed Status: 2 (bad input) for InvalidArgument, NotFound,
// AlreadyExists, FailedPrecondition and OutOfRange, which the user's files or arguments
// cause; 1 (runtime failure) for everything else (I/O errors, memory, internal errors).
int ExitCodeFor(const absl::Status& status);

// "[2, 3]".
std::string ShapeText(const std::vector<int64_t>& shape);

// "90.86 MB" (decimal units, as file sizes are usually quoted), "512 B".
std::string HumanBytes(int64_t bytes);
// "22,713,728".
std::string WithThousands(int64_t value);

// `text` with control characters (newlines, escape sequences, NUL) written as C escapes,
// so names from a file cannot break or colour the terminal output.
std::string Printable(const std::string& text);
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

// A progress callback for GatherOptions/BroadcastOptions::progress that rewrites one line
// on stderr ("gather: 1.2 GB of 3.4 GB, 2.10 GB/s") and ends it when done; an empty
// function unless `enabled` and stderr is a terminal.
std::function<void(int64_t, int64_t)> ProgressLine(const std::string& what, bool enabled);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_H_
