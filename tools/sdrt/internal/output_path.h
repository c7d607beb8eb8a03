// Checks on the paths the writing commands (shard, gather, make) create or replace, made
// before anything is written: an output is never a symbolic link (writing through it would
// replace the file it points at, e.g. a rank file of the checkpoint being read) and never
// is, contains or lies inside an input once every link in its folder is resolved.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_PATH_H_
#define SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_PATH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::cli {

// Checks `out` (a file or folder the command will create or replace atomically) against
// `inputs` (the files and folders it reads; ones that do not exist are skipped, reading
// them reports that). `out`'s folder is resolved with realpath(3), `out` itself must not be
// a symbolic link, and the resolved path must not equal an input's resolved path, lie
// inside an input folder, or contain an input (a folder replaced as a whole). The same by
// identity (device and inode): `out` (when it exists) must not be an input or any file in
// an input folder as a reader opens it (through a link, e.g. a rank file that links
// outside its folder), and no folder above `out` may be an input folder (a bind mount);
// and no file of an input folder may link into `out` (replacing a folder `out` would
// replace what the command reads).
// Errors: InvalidArgument naming `out`, the input and the rule; NotFound when `out`'s
// folder does not exist; the errno's status when it cannot be examined.
absl::Status CheckOutputPath(const std::string& out, const std::vector<std::string>& inputs);

// For a command that writes one safetensors file `out` (gather, make): an existing `out` is
// replaced only when asked (`overwrite`, the commands' --overwrite) and only when it is a
// safetensors file (SafetensorsFile::Open accepts it; a header-only description too), so neither a mistyped path nor a
// forgotten checkpoint is destroyed. AlreadyExists naming `out` and why otherwise (exists
// without --overwrite, not a regular file, not safetensors: the reader's reason); OK when
// it does not exist.
absl::Status CheckReplaceableSafetensors(const std::string& out, bool overwrite);

// For a command that streams one safetensors file `out` of `specs` and `metadata` (make):
// FailedPrecondition (exit 2) "OUT needs N GiB, M GiB free on DIR" when the file system of
// `out`'s folder has fewer bytes available to this user (statvfs f_bavail) than the file
// takes (its temporary file beside `out` takes the whole size); the error of
// SafetensorsFileBytes or statvfs otherwise.
absl::Status CheckFreeSpace(const std::string& out, absl::Span<const SafetensorsTensorSpec> specs,
                            const std::map<std::string, std::string>& metadata,
                            const WriteSafetensorsOptions& options);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_OUTPUT_PATH_H_
