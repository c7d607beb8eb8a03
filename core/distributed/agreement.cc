#include "sdrt/core/distributed/agreement.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// Local errors listed in one verdict; the ranks beyond are counted.
constexpr size_t kMaxListedErrors = 4;

std::string Prefixed(absl::string_view op, absl::string_view text) {
  return op.empty() ? std::string(text) : absl::StrCat(op, ": ", text);
}

// "rank 3", "ranks 0, 1", "ranks 0-2, 5" for ascending ranks.
std::string FormatRanks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    absl::StrAppend(&out, i > 0 ? ", " : "", ranks[i]);
    if (j > i) absl::StrAppend(&out, j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

// The verdict of step 1: every rank's error, ranks with the same one listed together.
absl::Status LocalErrors(absl::string_view op,
                         const std::vector<internal::AgreementMessage>& messages) {
  struct Group {
    const internal::AgreementMessage* message;
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  for (int q = 0; q < static_cast<int>(messages.size()); ++q) {
    const internal::AgreementMessage& m = messages[q];
    if (m.code == absl::StatusCode::kOk) continue;
    const auto same = std::find_if(groups.begin(), groups.end(), [&m](const Group& g) {
      return g.message->code == m.code && g.message->error == m.error &&
             g.message->verdict == m.verdict;
    });
    if (same != groups.end()) {
      same->ranks.push_back(q);
    } else {
      groups.push_back({&m, {q}});
    }
  }
  if (groups.empty()) return absl::OkStatus();
  // Every rank holds one collective call's error (its verdict: its ranks named in it).
  if (groups.size() == 1 && groups.front().message->verdict &&
      groups.front().ranks.size() == messages.size()) {
    return absl::Status(groups.front().message->code, Prefixed(op, groups.front().message->error));
  }
  std::vector<std::string> parts;
  int unlisted = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i < kMaxListedErrors) {
      parts.push_back(absl::StrCat(FormatRanks(groups[i].ranks), ": ", groups[i].message->error));
    } else {
      unlisted += static_cast<int>(groups[i].ranks.size());
    }
  }
  if (unlisted > 0) parts.push_back(absl::StrCat("and ", unlisted, " more ranks failed"));
  return absl::Status(groups.front().message->code, Prefixed(op, absl::StrJoin(parts, "; ")));
}

// The verdict of step 3: the first leaf where rank `differing`'s skeleton `b` departs
// from rank 0's `a`.
absl::Status FirstDifference(absl::string_view op, const AgreementSkeleton& a,
                             const AgreementSkeleton& b, int differing) {
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string pa = i < a.size() ? a[i].first : "";
    const std::string pb = i < b.size() ? b[i].first : "";
    const std::string da = i < a.size() ? a[i].second : "nothing";
    const std::string db = i < b.size() ? b[i].second : "nothing";
    if (pa == pb && da == db) continue;
    if (i < a.size() && i < b.size() && pa == pb) {
      return absl::InvalidArgumentError(
          Prefixed(op, absl::StrCat("ranks disagree at '", pa, "': rank 0 has ", da, ", rank ",
                                    differing, " has ", db)));
    }
    return absl::InvalidArgumentError(
        Prefixed(op, absl::StrCat("ranks disagree on the keys: leaf ", i, " is ",
                                  i < a.size() ? absl::StrCat("'", pa, "' (", da, ")") : "missing",
                                  " on rank 0 but ",
                                  i < b.size() ? absl::StrCat("'", pb, "' (", db, ")") : "missing",
                                  " on rank ", differing)));
  }
  return absl::InvalidArgumentError(Prefixed(
      op, absl::StrCat("the skeletons of rank 0 and rank ", differing, " hash differently")));
}

absl::Status Malformed(absl::string_view op, int q, absl::string_view what) {
  return absl::InvalidArgumentError(
      Prefixed(op, absl::StrCat("rank ", q, " sent a malformed agreement ", what)));
}

// The communicator's error `s` (a deadline, a lost peer) with its code, after the op's name:
// the caller learns which of its calls failed.
absl::Status CommError(absl::string_view op, const absl::Status& s) {
  return absl::Status(s.code(), Prefixed(op, s.message()));
}

// The agreement over a skeleton of hash `hash`; `encoded_skeleton` is called only on a
// mismatch, on the two ranks that send theirs. `collective_result`: `local_error` is what a
// collective call returned (internal::AgreeOnCollectiveResult).
absl::Status Agree(Communicator& comm, absl::string_view op, absl::string_view options,
                   uint64_t hash, const std::function<std::string()>& encoded_skeleton,
                   const absl::Status& local_error, bool collective_result,
                   TransferStats* stats, AgreementPayload* payload) {
  internal::AgreementMessage mine;
  mine.skeleton_hash = hash;
  mine.code = local_error.code();
  mine.error = std::string(local_error.message());
  mine.verdict = collective_result && !local_error.ok();
  mine.options = std::string(options);
  if (payload != nullptr) mine.payload = payload->mine;
  if (stats != nullptr) ++stats->collectives;
  absl::StatusOr<std::vector<std::string>> gathered =
      comm.AllGatherBytes(internal::EncodeAgreementMessage(mine));
  if (!gathered.ok()) return CommError(op, gathered.status());
  const std::vector<std::string>& all = *gathered;
  std::vector<internal::AgreementMessage> messages;
  messages.reserve(all.size());
  for (int q = 0; q < static_cast<int>(all.size()); ++q) {
    std::optional<internal::AgreementMessage> m = internal::DecodeAgreementMessage(all[q]);
    if (!m.has_value()) return Malformed(op, q, "message");
    messages.push_back(*std::move(m));
  }

  SDRT_RETURN_IF_ERROR(LocalErrors(op, messages));
  for (size_t q = 1; q < messages.size(); ++q) {
    if (messages[q].options != messages[0].options) {
      return absl::InvalidArgumentError(Prefixed(
          op, absl::StrCat("ranks disagree on the options: rank 0 has ", messages[0].options,
                           ", rank ", q, " has ", messages[q].options)));
    }
  }
  int differing = -1;
  for (size_t q = 1; q < messages.size() && differing < 0; ++q) {
    if (messages[q].skeleton_hash != messages[0].skeleton_hash) differing = static_cast<int>(q);
  }
  if (differing >= 0) {
    // Second exchange, only on a mismatch: the two skeletons themselves, to name the
    // difference.
    const bool sends = comm.rank() == 0 || comm.rank() == differing;
    if (stats != nullptr) ++stats->collectives;
    absl::StatusOr<std::vector<std::string>> exchanged =
        comm.AllGatherBytes(sends ? encoded_skeleton() : std::string());
    if (!exchanged.ok()) return CommError(op, exchanged.status());
    const std::vector<std::string>& skeletons = *exchanged;
    const std::optional<AgreementSkeleton> a = internal::DecodeSkeleton(skeletons[0]);
    if (!a.has_value()) return Malformed(op, 0, "skeleton");
    const std::optional<AgreementSkeleton> b = internal::DecodeSkeleton(skeletons[differing]);
    if (!b.has_value()) return Malformed(op, differing, "skeleton");
    return FirstDifference(op, *a, *b, differing);
  }
  if (payload != nullptr) {
    payload->all.clear();
    for (internal::AgreementMessage& m : messages) payload->all.push_back(std::move(m.payload));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AgreeAcrossRanks(Communicator& comm, absl::string_view op, absl::string_view options,
                              const AgreementSkeleton& skeleton, const absl::Status& local_error,
                              TransferStats* stats, AgreementPayload* payload) {
  const std::string encoded = internal::EncodeSkeleton(skeleton);
  return Agree(comm, op, options, internal::HashEncodedSkeleton(encoded),
               [&encoded] { return encoded; }, local_error, /*collective_result=*/false, stats,
               payload);
}

absl::Status AgreeAcrossRanksHashed(Communicator& comm, absl::string_view op,
                                    absl::string_view options, const HashedSkeleton& skeleton,
                                    const absl::Status& local_error, TransferStats* stats,
                                    AgreementPayload* payload) {
  return Agree(
      comm, op, options, skeleton.hash,
      [&skeleton] {
        return internal::EncodeSkeleton(skeleton.build ? skeleton.build() : AgreementSkeleton());
      },
      local_error, /*collective_result=*/false, stats, payload);
}

namespace internal {

absl::Status AgreeOnCollectiveResult(Communicator& comm, const absl::Status& result) {
  return Agree(
      comm, "", "", 0, [] { return std::string(); }, result, /*collective_result=*/true,
      nullptr, nullptr);
}

}  // namespace internal

}  // namespace sdrt
