// DescribeSource and DecideRead (read_policy.h).
#include "sdrt/core/distributed/internal/load/read_policy.h"

#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "xxhash.h"

namespace sdrt::internal {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";
constexpr absl::string_view kCannot = "cannot ";

bool IsSharded(const std::string& description) {
  return description == CheckpointKindName(CheckpointKind::kShardedFolder);
}

// "a safetensors file", "an sdrt sharded folder".
std::string Article(absl::string_view kind) {
  return absl::StrCat(absl::StartsWith(kind, "sdrt") ? "an " : "a ", kind);
}

// The kind's name of an opened source's description (without its fingerprint).
absl::string_view KindOf(absl::string_view description) {
  constexpr size_t kHashText = 17;  // " " and 16 hex digits
  if (description.size() > kHashText && description[description.size() - kHashText] == ' ') {
    description.remove_suffix(kHashText);
  }
  return description;
}

}  // namespace

std::string DescribeSource(const CheckpointSource* source, const absl::Status& open_status,
                           bool fingerprint) {
  if (source == nullptr) return absl::StrCat(kCannot, "open it (", open_status.message(), ")");
  std::string out(CheckpointKindName(source->kind()));
  if (!fingerprint || source->kind() == CheckpointKind::kShardedFolder) return out;
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (size_t i = 0; i < source->files().size(); ++i) {
    const CheckpointSourceFile& f = source->files()[i];
    struct stat st;
    if (stat(f.path.c_str(), &st) != 0) {
      XXH64_freeState(state);
      return absl::StrCat(kCannot, "read it (", f.path, ": stat: ", std::strerror(errno), ")");
    }
    const SafetensorsFile& file = source->file(static_cast<int>(i));
    const int64_t numbers[3] = {f.size, static_cast<int64_t>(st.st_mtim.tv_sec),
                                static_cast<int64_t>(st.st_mtim.tv_nsec)};
    XXH64_update(state, numbers, sizeof(numbers));
    XXH64_update(state, file.storage()->data(), static_cast<size_t>(file.data_offset()));
  }
  const uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  return absl::StrFormat("%s %016x", out, hash);
}

absl::StatusOr<ReadDecision> DecideRead(ReadMode requested,
                                        const std::vector<std::string>& descriptions) {
  const std::string& root = descriptions.front();
  const bool sharded = IsSharded(root);
  if (sharded && requested == ReadMode::kRoot) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp,
                     ": the source is an sdrt sharded folder: every rank reads its own "
                     "rank files (read kRoot broadcasts a full checkpoint)"));
  }
  if (sharded || requested == ReadMode::kAll) {
    // Every rank runs the path rank 0's source picks, with a source of its family.
    for (size_t q = 1; q < descriptions.size(); ++q) {
      const std::string& d = descriptions[q];
      if (!absl::StartsWith(d, kCannot) && IsSharded(d) != sharded) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, ": rank ", q, "'s source is ", Article(KindOf(d)), " but rank 0's is ",
            Article(KindOf(root)), " (every rank loads the same checkpoint)"));
      }
    }
    if (sharded)
      return ReadDecision{ReadMode::kAll, true, "an sdrt sharded folder: rank files, resharded"};
    return ReadDecision{ReadMode::kAll, false, "requested"};
  }
  if (requested == ReadMode::kRoot) return ReadDecision{ReadMode::kRoot, false, "requested"};
  if (absl::StartsWith(root, kCannot)) {
    return ReadDecision{ReadMode::kRoot, false, absl::StrCat("auto: rank 0 ", root)};
  }
  // The first rank that differs says how; the others (up to 16) are named after it.
  std::vector<size_t> differ;
  for (size_t q = 1; q < descriptions.size(); ++q) {
    if (descriptions[q] != root) differ.push_back(q);
  }
  if (differ.empty())
    return ReadDecision{ReadMode::kAll, false, "auto: every rank sees the same files"};
  const std::string& d = descriptions[differ[0]];
  std::string reason =
      absl::StrCat("auto: rank ", differ[0], " ",
                   absl::StartsWith(d, kCannot) ? d : "sees other files than rank 0");
  if (differ.size() > 1) {
    const size_t shown = std::min<size_t>(differ.size(), 17);
    absl::StrAppend(&reason, "; ", differ.size() == 2 ? "rank " : "ranks ",
                    absl::StrJoin(differ.begin() + 1, differ.begin() + shown, ", "),
                    shown < differ.size() ? ", ..." : "", " ", differ.size() == 2 ? "does" : "do",
                    " not see rank 0's files either");
  }
  return ReadDecision{ReadMode::kRoot, false, std::move(reason)};
}

int ResolveReaders(int readers, bool device, int cpus) {
  if (readers > 0) return readers;
  if (!device) return 1;
  return std::min(kMaxAutomaticReaders, std::max(1, cpus / 2));
}

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return CPU_COUNT(&set);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace sdrt::internal
