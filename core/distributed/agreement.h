// Agreement before data moves: every rank says what it is about to move and what went
// wrong locally, and one small collective turns that into the same verdict on every rank,
// found before any data collective, so that a rank alone in error or ranks that were
// handed different inputs fail alike instead of hanging in mismatched collectives or
// moving wrong bytes (docs/CASES.md case-012, case-015, case-016).
//
// Used by GatherStateDict, BroadcastStateDict and DistributeStateDict
// (core/distributed/distributed_state_dict.h) and by the multi-rank `sdrt` commands,
// which agree on every step's status so that every rank exits alike.
#ifndef SDRT_CORE_DISTRIBUTED_AGREEMENT_H_
#define SDRT_CORE_DISTRIBUTED_AGREEMENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/agreement_skeleton.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// Bytes carried by the agreement's one collective (e.g. a broadcast root's skeleton):
// `mine` goes to every rank; on success `all` holds every rank's, in rank order.
struct AgreementPayload {
  std::string mine;
  std::vector<std::string> all;
};

// Collective over `comm`: one AllGatherBytes of (this rank's local error, `options`, a
// hash of `skeleton`, the payload), and a second one only when the skeletons differ (to
// name the difference). Returns the same status on every rank, the first that applies:
//   1. some rank reports an error: "<op>: rank R: <message>" with the code of the lowest
//      failing rank; ranks with the same code and message are listed together ("ranks
//      0-2, 5: <message>"); at most four messages, then "and N more ranks failed";
//   2. some rank's `options` differ from rank 0's (a description of the options that
//      shape the collectives, e.g. "root 0, bucket_bytes 1024"): InvalidArgument "<op>:
//      ranks disagree on the options: rank 0 has <options>, rank R has <options>" for
//      the lowest such rank R;
//   3. some rank's `skeleton` differs from rank 0's: InvalidArgument "<op>: ranks
//      disagree at '<path>': rank 0 has <description>, rank R has <description>" for the
//      first differing leaf of the lowest such rank R ("ranks disagree on the keys: leaf i
//      is ..." when the paths differ; a leaf one rank lacks is "missing");
//   4. otherwise OK, and `payload->all` (when `payload` is not null) is filled.
// A rank's bytes that cannot be decoded (a malformed message) give InvalidArgument "<op>:
// rank R sent a malformed agreement message" on every rank; decoding never throws. `op`
// (e.g. "GatherStateDict") prefixes every message; when empty, there is no prefix. Counts
// its calls into `comm` in stats->collectives when `stats` is not null. The communicator's
// own errors are returned with their code, after "<op>: " (a failed exchange reaches no
// verdict).
absl::Status AgreeAcrossRanks(Communicator& comm, absl::string_view op, absl::string_view options,
                              const AgreementSkeleton& skeleton, const absl::Status& local_error,
                              TransferStats* stats = nullptr, AgreementPayload* payload = nullptr);

// AgreeAcrossRanks over a HashedSkeleton: the same exchange and verdicts. On a mismatch
// whose built skeletons read alike (the hash saw something their text leaves out), step
// 3 says "the skeletons of rank 0 and rank R hash differently".
absl::Status AgreeAcrossRanksHashed(Communicator& comm, absl::string_view op,
                                    absl::string_view options, const HashedSkeleton& skeleton,
                                    const absl::Status& local_error, TransferStats* stats = nullptr,
                                    AgreementPayload* payload = nullptr);

}  // namespace SDRT_API

#endif  // SDRT_CORE_DISTRIBUTED_AGREEMENT_H_
