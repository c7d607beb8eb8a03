// Reading a small input file (index.json, PLAN.json) whole, safely: the one reader every
// JSON or text file sdrt parses goes through. Safetensors files are mapped instead
// (SafetensorsFile::Open), with the same refusal of files that are not regular.
// Not API: plumbing shared across folders, in namespace sdrt::internal (hidden, never in
// libsdrt.so's exported symbols).
#ifndef SDRT_CORE_IO_BOUNDED_FILE_H_
#define SDRT_CORE_IO_BOUNDED_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace sdrt::internal {

// The size limit for a JSON file sdrt reads (index.json, PLAN.json): 64 MiB, far above any
// real one (an index of 100,000 tensors is a few MiB).
inline constexpr int64_t kMaxJsonFileBytes = int64_t{64} << 20;

// Reads the file at `path` whole into a string. The path may be a symlink to a regular
// file; it is opened with O_NONBLOCK (opening a FIFO or a device never waits for a
// writer), then fstat'ed: anything but a regular file is refused, and so is a file of more
// than `max_bytes` bytes; at most `max_bytes` + 1 bytes are ever read, so a file that grows
// while being read is refused rather than read without end.
//
// Errors (the message is the reason alone; callers prefix the path and what the file is):
//   open failed: the errno's code (NotFound for a missing file), "<strerror>";
//   fstat failed: the errno's code, "fstat: <strerror>";
//   not a regular file: InvalidArgument, "not a regular file (a FIFO)" (or a character
//     device, a block device, a socket, a folder);
//   too large: InvalidArgument, "<N> bytes, over the limit of <max_bytes> bytes (<M> MiB)";
//   read failed: the errno's code, "read: <strerror>".
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_IO_BOUNDED_FILE_H_
