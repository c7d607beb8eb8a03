// ChooseRead (read_mode.h): the ranks compare what they see of SRC's files.
#include "sdrt/tools/sdrt/internal/read_mode.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "xxhash.h"

namespace sdrt::cli {
namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;

// "size mtime xxh64" of one file's header, or the reason it cannot be read.
absl::StatusOr<std::string> Fingerprint(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  std::string header;
  absl::Status status = absl::OkStatus();
  uint8_t len_bytes[8];
  if (fstat(fd, &st) != 0 || pread(fd, len_bytes, 8, 0) != 8) {
    status = absl::DataLossError(absl::StrCat(path, ": cannot read its header length"));
  } else {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
    if (len > static_cast<uint64_t>(kMaxHeaderBytes) ||
        static_cast<int64_t>(len) > st.st_size - 8) {
      status = absl::DataLossError(absl::StrCat(path, ": header length ", len, " out of range"));
    } else {
      header.resize(static_cast<size_t>(len));
      if (pread(fd, header.data(), header.size(), 8) != static_cast<ssize_t>(header.size())) {
        status = absl::DataLossError(absl::StrCat(path, ": short read of its header"));
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return absl::StrCat(st.st_size, " ", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, " ",
                      XXH64(header.data(), header.size(), 0));
}

// This rank's view of SRC: kind, then "name size mtime hash" per file; or why not.
std::string Describe(const std::string& src) {
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(src);
  if (!source.ok()) return absl::StrCat("cannot open it (", source.status().message(), ")");
  std::string out(CheckpointKindName(source->kind()));
  for (const CheckpointSourceFile& f : source->files()) {
    absl::StatusOr<std::string> print = Fingerprint(f.path);
    if (!print.ok()) return absl::StrCat("cannot read it (", print.status().message(), ")");
    absl::StrAppend(&out, "\n", f.name, " ", *print);
  }
  return out;
}

}  // namespace

absl::StatusOr<ReadChoice> ChooseRead(Communicator& world, const std::string& src,
                                      const std::string& requested) {
  if (requested == "root") return ReadChoice{false, "--read root"};
  if (requested == "all") return ReadChoice{true, "--read all"};
  if (requested != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--read must be auto, all or root, got '", requested, "'"));
  }
  absl::StatusOr<std::vector<std::string>> all = world.AllGatherBytes(Describe(src));
  if (!all.ok()) return all.status();
  if ((*all)[0].rfind("cannot ", 0) == 0) {
    return ReadChoice{false, absl::StrCat("auto: rank 0 ", (*all)[0])};
  }
  for (size_t q = 1; q < all->size(); ++q) {
    if ((*all)[q] != (*all)[0]) {
      const bool cannot = (*all)[q].rfind("cannot ", 0) == 0;
      return ReadChoice{false, absl::StrCat("auto: rank ", q, " ",
                                            cannot ? (*all)[q] : "sees other files than rank 0")};
    }
  }
  return ReadChoice{true, "auto: every rank sees the same files"};
}

absl::StatusOr<std::vector<int64_t>> AllGatherInt64(Communicator& world, int64_t mine) {
  absl::StatusOr<std::vector<std::string>> all = world.AllGatherBytes(absl::StrCat(mine));
  if (!all.ok()) return all.status();
  std::vector<int64_t> out;
  for (const std::string& s : *all) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v)) return absl::InternalError("AllGatherInt64: a malformed value");
    out.push_back(v);
  }
  return out;
}

}  // namespace sdrt::cli
