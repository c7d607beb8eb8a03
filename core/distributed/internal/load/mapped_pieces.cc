// MappedPieces (mapped_pieces.h).
#include "sdrt/core/distributed/internal/load/mapped_pieces.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/io/internal/open_regular_file.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/status_macros.h"

// Linux 5.14's; glibc before 2.35 lacks the name (the kernel's answer decides, MapFile).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace sdrt::internal {
namespace {

// A segment bound no piece reaches (and whose 8x still fits int64: read_plan.cc's cuts).
constexpr int64_t kUncut = int64_t{1} << 56;

}  // namespace

MappedPieces::MappedPieces(const CheckpointSource& source)
    : source_(source),
      maps_(source.files().size()),
      refused_(source.files().size(), false),
      ranges_(source.files().size()) {}

absl::StatusOr<bool> MappedPieces::TryMap(const CheckpointSourceTensor& entry,
                                          const ShardRuns& runs, Tensor& dest) {
  const int bits = ElementBits(entry.dtype);
  if (unavailable_ || entry.file < 0 || bits % 8 != 0 || !dest.is_meta() ||
      dest.dtype() != entry.dtype) {
    return false;
  }
  // One byte run of the file: the read plan's one segment of the piece, uncut.
  segments_.clear();
  SDRT_RETURN_IF_ERROR(PlanTensorSegments(
      ReadTensor{entry.file, entry.offset, bits, entry.shape, &runs}, 0, kUncut, segments_));
  if (segments_.size() != 1) return false;
  const int64_t begin = segments_[0].file_offset;
  const int64_t end = begin + segments_[0].bytes;
  if (end - begin != dest.nbytes()) return false;
  if (begin % ElementAlignment(entry.dtype) != 0) {  // a view there would be misaligned
    if (unaligned_++ == 0) first_unaligned_ = entry.name;
    return false;
  }
  const size_t f = static_cast<size_t>(entry.file);
  SDRT_ASSIGN_OR_RETURN(const bool mapped, MapFile(f));
  if (!mapped) return false;
  SDRT_ASSIGN_OR_RETURN(dest, Tensor::AtByteOffset(maps_[f], begin, entry.dtype, dest.shape()));
  ranges_[f].emplace_back(begin, end);
  bytes_ += end - begin;
  return true;
}

std::string MappedPieces::not_mapped() const {
  if (unaligned_ == 0) return not_mapped_;
  return absl::StrCat(not_mapped_, not_mapped_.empty() ? "" : "; ", unaligned_,
                      " piece(s) at a file offset not aligned for their dtype, the first of '",
                      first_unaligned_, "'");
}

absl::StatusOr<bool> MappedPieces::MapFile(size_t f) {
  if (maps_[f] != nullptr || unavailable_ || refused_[f]) return maps_[f] != nullptr;
  const CheckpointSourceFile& file = source_.files()[f];
  FileIdentity now;
  absl::StatusOr<std::shared_ptr<Storage>> mapping =
      MapRegularFile(file.path, /*writable=*/true, &now);
  if (mapping.status().code() == absl::StatusCode::kResourceExhausted) {  // ENOMEM: read it
    refused_[f] = true;
    if (not_mapped_.empty()) {
      not_mapped_ = absl::StrCat(file.path, ": ", mapping.status().message());
    }
    return false;
  }
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(),
                        absl::StrCat(file.path, ": ", mapping.status().message()));
  }
  SDRT_RETURN_IF_ERROR(
      CheckSameFile(file.path, FileIdentity{file.device, file.inode, file.size}, now));
  // Populate() needs MADV_POPULATE_READ: without it (Linux < 5.14: EINVAL; a sandbox that
  // refuses the call) a file cut short later would fault on first touch instead of failing
  // the load, so nothing is mapped.
  const long page = sysconf(_SC_PAGESIZE);
  if (madvise((*mapping)->data(), static_cast<size_t>(std::min<int64_t>(page, file.size)),
              MADV_POPULATE_READ) != 0) {
    unavailable_ = true;
    not_mapped_ = absl::StrCat("madvise(MADV_POPULATE_READ): ", strerror(errno),
                               " (it needs Linux >= 5.14)");
    return false;
  }
  maps_[f] = *std::move(mapping);
  return true;
}

absl::Status MappedPieces::PopulateRange(size_t f, int64_t begin, int64_t end) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  begin = begin / page * page;
  uint8_t* const base = static_cast<uint8_t*>(maps_[f]->data());
  if (end > begin && madvise(base + begin, static_cast<size_t>(end - begin),
                             MADV_POPULATE_READ) != 0) {
    const int error = errno;
    // EFAULT: the file is shorter than the range now; ENOMEM: no memory for page tables;
    // anything else is the kernel's refusal of a call that its first page passed (MapFile).
    const absl::StatusCode code = error == EFAULT   ? absl::StatusCode::kDataLoss
                                  : error == ENOMEM ? absl::StatusCode::kResourceExhausted
                                                    : absl::StatusCode::kInternal;
    return absl::Status(code, absl::StrCat(
        source_.files()[f].path, ": mapping bytes [", begin, ", ", end, "): ",
        error == EFAULT ? "the file was cut short (or could not be read) since it was opened"
                        : strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status MappedPieces::Populate() {
  const int64_t page = sysconf(_SC_PAGESIZE);
  for (size_t f = 0; f < maps_.size(); ++f) {
    std::vector<std::pair<int64_t, int64_t>>& ranges = ranges_[f];
    if (maps_[f] == nullptr || ranges.empty()) continue;
    std::sort(ranges.begin(), ranges.end());
    // Ranges on the same or touching pages joined: one madvise each.
    int64_t begin = ranges[0].first;
    int64_t end = begin;
    for (const auto& [first, last] : ranges) {
      if (first / page * page > end) {
        SDRT_RETURN_IF_ERROR(PopulateRange(f, begin, end));
        begin = first;
      }
      end = std::max(end, last);
    }
    SDRT_RETURN_IF_ERROR(PopulateRange(f, begin, end));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
