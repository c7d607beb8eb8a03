// The private helpers of AgreeAcrossRanks (core/distributed/agreement.h): how a leaf is
// described, and the bytes the agreement exchanges, encoded with length prefixes and
// decoded with every length checked against what arrived (a peer's bytes are never
// trusted; decoding never throws). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_AGREEMENT_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_AGREEMENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/agreement_skeleton.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"

namespace sdrt::internal {

// What every rank must agree on about a leaf: "DTensor float32[8, 4] [S(0)] on mesh (2, 2)",
// "ShardedTensor bfloat16[10]", "Tensor int64[3]", or the kind of a non-tensor ("int").
// Local shapes and values are left out: they differ between ranks by design. One
// describer serves the leaves of one call: it prints each mesh once and reuses the text of
// the placements when a leaf has the same as the leaf before (the common case), so a
// description costs one string, not a mesh's worth of formatting per leaf.
class AgreementDescriber {
 public:
  std::string operator()(const Value& value);

 private:
  absl::flat_hash_map<const DeviceMesh*, std::string> meshes_;
  std::vector<Placement> last_placements_;
  std::string last_placements_text_;
};

// The hash every rank compares, computed from a compact binary record per leaf (path,
// kind, dtype, global shape, placements, and the mesh's device type, shape, ranks and
// names, hashed once per mesh) instead of from AgreementDescriber's text: a few dozen
// instructions per leaf instead of a string. Two leaves that describe alike hash alike;
// leaves whose descriptions differ hash differently (barring a 64-bit collision), and so
// do meshes that differ only past the ranks a description lists.
class SkeletonHasher {
 public:
  SkeletonHasher();
  ~SkeletonHasher();
  void Add(absl::string_view path, const Value& value);
  uint64_t Digest() const;

 private:
  uint64_t MeshDigest(const DeviceMesh& mesh);

  struct State;
  std::unique_ptr<State> state_;
  absl::flat_hash_map<const DeviceMesh*, uint64_t> meshes_;
  std::vector<uint64_t> record_;  // reused between leaves
};

// The HashedSkeleton of a list of leaves (internal/leaves.h, or anything whose elements
// have `path` and `value`): SkeletonHasher's digest of them, and the AgreementDescriber text
// built only when the ranks' hashes differ. `leaves` must outlive the result.
template <typename LeafList>
HashedSkeleton HashLeaves(const LeafList& leaves) {
  SkeletonHasher hasher;
  for (const auto& leaf : leaves) hasher.Add(leaf.path, *leaf.value);
  HashedSkeleton skeleton;
  skeleton.hash = hasher.Digest();
  skeleton.build = [&leaves] {
    AgreementDescriber describe;
    AgreementSkeleton text;
    text.reserve(leaves.size());
    for (const auto& leaf : leaves) text.emplace_back(leaf.path, describe(*leaf.value));
    return text;
  };
  return skeleton;
}

// One rank's part of the agreement exchange.
struct AgreementMessage {
  uint64_t skeleton_hash = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string error;  // the local error's message
  // The local error is a collective call's result (AgreeOnCollectiveResult): the same on
  // every rank when that call reached its verdict, its ranks named in it.
  bool verdict = false;
  std::string options;
  std::string payload;
};

std::string EncodeAgreementMessage(const AgreementMessage& message);

// Collective over `comm`: agrees on what a collective call (one that agrees within, as
// LoadStateDict does) returned on this rank, `result`. When every rank holds the same error
// (the call's own verdict, its ranks named in it) that error comes back as it is; other
// errors are listed by rank as AgreeAcrossRanks lists local errors (a communicator's error
// that reached some ranks only); OK when every rank's is. For a command's step around
// such a call, which would otherwise name the ranks twice.
absl::Status AgreeOnCollectiveResult(Communicator& comm, const absl::Status& result);

// nullopt when `bytes` are not exactly one encoded message (short, lengths past the end,
// trailing bytes, a status code outside absl's, a verdict flag other than 0 or 1).
std::optional<AgreementMessage> DecodeAgreementMessage(absl::string_view bytes);

// The skeleton as length-prefixed strings; its XXH64 is the hash the ranks compare.
std::string EncodeSkeleton(const AgreementSkeleton& skeleton);
uint64_t HashEncodedSkeleton(absl::string_view encoded);

// nullopt when `bytes` are not exactly one encoded skeleton.
std::optional<AgreementSkeleton> DecodeSkeleton(absl::string_view bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_AGREEMENT_H_
