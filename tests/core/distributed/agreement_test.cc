// Single-process tests of AgreeAcrossRanks and AgreeAcrossRanksHashed
// (core/distributed/agreement.h), the skeleton hash and the leaf descriptions: one rank over the
// loopback communicator, and rank 0 of up to six ranks whose peers' bytes are scripted
// (made with the private message codec, or broken on purpose), so that the verdict's order
// (local errors, then options, then skeletons), its wording, the payload and the refusal of
// malformed bytes are checked without MPI. The multi-rank behaviour is in
// agreement_mpi_test.cc.
#include "sdrt/core/distributed/agreement.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tests/support/loopback_communicator.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

// Rank 0 of `size` ranks: the k-th AllGatherBytes returns this rank's bytes followed by
// replies[k] (the other ranks' bytes), or `failure` when it is not OK.
class ScriptedPeers final : public Communicator {
 public:
  ScriptedPeers(int size, std::vector<std::vector<std::string>> replies)
      : Communicator(0, size), replies_(std::move(replies)) {}
  absl::string_view backend() const override { return "scripted"; }
  Device device() const override { return Device::CPU(); }
  int calls() const { return calls_; }
  absl::Status failure = absl::OkStatus();

 protected:
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override {
    if (!failure.ok()) return failure;
    std::vector<std::string> all = {mine};
    const std::vector<std::string>& peers = replies_.at(static_cast<size_t>(calls_++));
    all.insert(all.end(), peers.begin(), peers.end());
    return all;
  }
  absl::Status DoAllGather(void*, const void*, int64_t) override { return Unused(); }
  absl::Status DoAllGatherV(void*, const void*, absl::Span<const int64_t>) override {
    return Unused();
  }
  absl::Status DoBroadcast(absl::Span<const Tensor>, int) override { return Unused(); }
  absl::Status DoAllReduce(Tensor&, ReduceOp) override { return Unused(); }
  absl::Status DoBroadcastBytes(std::string*, int) override { return Unused(); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return Unused(); }
  absl::Status DoBarrier() override { return Unused(); }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used by the agreement"); }
  std::vector<std::vector<std::string>> replies_;
  int calls_ = 0;
};

const AgreementSkeleton kSkeleton = {{"a", "Tensor float32[2]"},
                                     {"b.w", "DTensor bfloat16[8, 4] [S(0)] on mesh (2)"}};

// A peer's message: `skeleton`, `options`, an error unless `error` is OK, a payload.
std::string Peer(const absl::Status& error = absl::OkStatus(), const std::string& options = "o",
                 const AgreementSkeleton& skeleton = kSkeleton, const std::string& payload = "") {
  internal::AgreementMessage m;
  m.skeleton_hash = internal::HashEncodedSkeleton(internal::EncodeSkeleton(skeleton));
  m.code = error.code();
  m.error = std::string(error.message());
  m.options = options;
  m.payload = payload;
  return internal::EncodeAgreementMessage(m);
}

TEST(AgreeAcrossRanks, OneRankAgreesWithItselfAndCarriesThePayload) {
  test::Loopback comm(Device::CPU(), 0, 1, "mpi");
  TransferStats stats;
  AgreementPayload payload{"root skeleton", {}};
  EXPECT_TRUE(
      AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus(), &stats, &payload).ok());
  EXPECT_EQ(payload.all, std::vector<std::string>{"root skeleton"});
  EXPECT_EQ(stats.collectives, 1);
  EXPECT_EQ(stats.exchanges, 0);
}

TEST(AgreeAcrossRanks, OneRankReturnsItsOwnErrorPrefixed) {
  test::Loopback comm(Device::CPU(), 0, 1, "mpi");
  const absl::Status s =
      AgreeAcrossRanks(comm, "Op", "", {}, absl::NotFoundError("no file 'x'"), nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "Op: rank 0: no file 'x'");
  // Without an op there is no prefix (the command line prints its own).
  const absl::Status bare = AgreeAcrossRanks(comm, "", "", {}, absl::NotFoundError("no file"));
  EXPECT_EQ(bare.message(), "rank 0: no file");
}

TEST(AgreeAcrossRanks, RanksWithTheSameErrorAreListedTogether) {
  const absl::Status full = absl::ResourceExhaustedError("disk full");
  ScriptedPeers comm(4, {{Peer(full), Peer(full), Peer(full)}});
  const absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "Op: ranks 1-3: disk full");

  ScriptedPeers mixed(4, {{Peer(absl::InvalidArgumentError("b")), Peer(full),
                           Peer(absl::InvalidArgumentError("b"))}});
  const absl::Status m = AgreeAcrossRanks(mixed, "Op", "o", kSkeleton, full);
  EXPECT_EQ(m.code(), absl::StatusCode::kResourceExhausted) << "the lowest failing rank's code";
  EXPECT_EQ(m.message(), "Op: ranks 0, 2: disk full; ranks 1, 3: b");
}

TEST(AgreeAcrossRanks, AtMostFourErrorsAreListed) {
  std::vector<std::string> peers;
  for (int q = 1; q < 6; ++q) peers.push_back(Peer(absl::InternalError(absl::StrCat("e", q))));
  ScriptedPeers comm(6, {peers});
  const absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "Op: rank 1: e1; rank 2: e2; rank 3: e3; rank 4: e4; and 1 more ranks failed");
}

TEST(AgreeAcrossRanks, LocalErrorsComeBeforeOptionsAndOptionsBeforeSkeletons) {
  const AgreementSkeleton other = {{"a", "Tensor float64[2]"}};
  // An error, other options and another skeleton: the error wins.
  ScriptedPeers comm(3, {{Peer(absl::OkStatus(), "x", other), Peer(absl::AbortedError("gone"))}});
  absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "Op: rank 2: gone");
  // Other options and another skeleton: the options win, naming the lowest such rank.
  ScriptedPeers options(3, {{Peer(absl::OkStatus(), "o", other), Peer(absl::OkStatus(), "x")}});
  s = AgreeAcrossRanks(options, "Op", "root 0, bucket_bytes 2", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Op: ranks disagree on the options: rank 0 has root 0, bucket_bytes 2, rank 1 has o");
  EXPECT_EQ(options.calls(), 1) << "no second exchange for options";
}

TEST(AgreeAcrossRanks, ADifferentSkeletonIsNamedByItsFirstDifferingLeaf) {
  const AgreementSkeleton other = {{"a", "Tensor float32[2]"},
                                   {"b.w", "DTensor float32[8, 4] [S(0)] on mesh (2)"}};
  // The second exchange carries the skeletons of rank 0 and of the first differing rank.
  ScriptedPeers comm(
      3, {{Peer(), Peer(absl::OkStatus(), "o", other)}, {"", internal::EncodeSkeleton(other)}});
  TransferStats stats;
  absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus(), &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Op: ranks disagree at 'b.w': rank 0 has DTensor bfloat16[8, 4] [S(0)] on mesh (2), "
            "rank 2 has DTensor float32[8, 4] [S(0)] on mesh (2)");
  EXPECT_EQ(stats.collectives, 2);

  const AgreementSkeleton shorter = {{"a", "Tensor float32[2]"}};
  ScriptedPeers keys(2,
                     {{Peer(absl::OkStatus(), "o", shorter)}, {internal::EncodeSkeleton(shorter)}});
  s = AgreeAcrossRanks(keys, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Op: ranks disagree on the keys: leaf 1 is 'b.w' (DTensor bfloat16[8, 4] [S(0)] on "
            "mesh (2)) on rank 0 but missing on rank 1");
}

TEST(AgreeAcrossRanks, EveryRanksPayloadComesBackInRankOrder) {
  ScriptedPeers comm(3, {{Peer(absl::OkStatus(), "o", kSkeleton, "one"),
                          Peer(absl::OkStatus(), "o", kSkeleton, std::string("t\0o", 3))}});
  AgreementPayload payload{"zero", {}};
  ASSERT_TRUE(
      AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus(), nullptr, &payload).ok());
  EXPECT_EQ(payload.all, (std::vector<std::string>{"zero", "one", std::string("t\0o", 3)}));
}

void ExpectMalformed(const std::string& peer_bytes, const std::string& what) {
  ScriptedPeers comm(2, {{peer_bytes}});
  const absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  EXPECT_EQ(s.message(), "Op: rank 1 sent a malformed agreement message") << what;
}

TEST(AgreeAcrossRanks, MalformedPeerBytesAreInvalidArgumentNeverACrash) {
  const std::string good = Peer(absl::InternalError("boom"), "options", kSkeleton, "payload");
  for (size_t n = 0; n < good.size(); ++n) {
    ExpectMalformed(good.substr(0, n), absl::StrCat("the first ", n, " bytes"));
  }
  ExpectMalformed(good + "x", "a trailing byte");
  std::string bad_code = good;
  bad_code[8] = 99;  // the status code
  ExpectMalformed(bad_code, "status code 99");
  std::string bad_verdict = good;
  bad_verdict[16] = 2;  // the verdict flag
  ExpectMalformed(bad_verdict, "verdict flag 2");
  std::string huge = good;
  for (int i = 0; i < 8; ++i) huge[24 + i] = '\xff';  // the error's length
  ExpectMalformed(huge, "a length past the end");
  // A malformed skeleton in the second exchange.
  ScriptedPeers comm(2, {{Peer(absl::OkStatus(), "o", {})}, {"\x01"}});
  const absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Op: rank 1 sent a malformed agreement skeleton");
}

TEST(AgreeAcrossRanks, ACommunicatorFailureKeepsItsCodeAfterTheOpsName) {
  ScriptedPeers comm(2, {});
  comm.failure = absl::UnavailableError("all_gather_bytes (mpi): connection lost");
  const absl::Status s = AgreeAcrossRanks(comm, "Op", "o", kSkeleton, absl::OkStatus());
  EXPECT_EQ(s, absl::UnavailableError("Op: all_gather_bytes (mpi): connection lost"));
}

// A command's step around a collective call that agrees within: every rank holds the
// call's verdict, which the step's own agreement passes on without naming the ranks again.
TEST(AgreeOnCollectiveResult, OneVerdictOnEveryRankIsNotPrefixedAgain) {
  const absl::Status boom = absl::DataLossError("short read");
  ScriptedPeers inner_comm(2, {{Peer(boom)}});
  const absl::Status inner = AgreeAcrossRanks(inner_comm, "Load", "o", kSkeleton, boom);
  EXPECT_EQ(inner, absl::DataLossError("Load: ranks 0, 1: short read"));
  // Rank 1 holds the same verdict, flagged as a collective call's result.
  internal::AgreementMessage peer;
  peer.code = inner.code();
  peer.error = std::string(inner.message());
  peer.verdict = true;
  ScriptedPeers outer_comm(2, {{internal::EncodeAgreementMessage(peer)}});
  EXPECT_EQ(internal::AgreeOnCollectiveResult(outer_comm, inner), inner);
  EXPECT_EQ(outer_comm.calls(), 1);
  // Without the flag (a step that was no collective call) the ranks are named as before.
  peer.verdict = false;
  ScriptedPeers step(2, {{internal::EncodeAgreementMessage(peer)}});
  EXPECT_EQ(AgreeAcrossRanks(step, "", "", {}, inner).message(),
            "ranks 0, 1: Load: ranks 0, 1: short read");
  // Results that differ (a communicator's error that reached one rank) are listed by rank.
  peer.verdict = true;
  peer.code = absl::StatusCode::kUnavailable;
  peer.error = "Load: all_gather_bytes (mpi): connection lost";
  ScriptedPeers differing(2, {{internal::EncodeAgreementMessage(peer)}});
  const absl::Status listed = internal::AgreeOnCollectiveResult(differing, inner);
  EXPECT_EQ(listed.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(listed.message(),
            "rank 0: Load: ranks 0, 1: short read; "
            "rank 1: Load: all_gather_bytes (mpi): connection lost");
  // A rank that succeeded while another failed: the failure, by rank.
  const std::string ok = internal::EncodeAgreementMessage({});
  ScriptedPeers one(2, {{ok}});
  EXPECT_EQ(internal::AgreeOnCollectiveResult(one, inner).message(),
            "rank 0: Load: ranks 0, 1: short read");
  ScriptedPeers none(2, {{ok}});
  EXPECT_TRUE(internal::AgreeOnCollectiveResult(none, absl::OkStatus()).ok());
}

TEST(AgreementCodec, SkeletonsRoundTripAndTheirHashesDiffer) {
  const std::string encoded = internal::EncodeSkeleton(kSkeleton);
  const std::optional<AgreementSkeleton> decoded = internal::DecodeSkeleton(encoded);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, kSkeleton);
  EXPECT_FALSE(internal::DecodeSkeleton(encoded + "x").has_value());
  EXPECT_FALSE(internal::DecodeSkeleton(encoded.substr(0, encoded.size() - 1)).has_value());
  // The same strings split differently hash differently (lengths are part of the bytes).
  const AgreementSkeleton moved = {{"ab", "c"}}, moved_back = {{"a", "bc"}};
  EXPECT_NE(internal::HashEncodedSkeleton(internal::EncodeSkeleton(moved)),
            internal::HashEncodedSkeleton(internal::EncodeSkeleton(moved_back)));
}

// A peer whose skeleton hashes to `hash` (a HashedSkeleton's).
std::string HashedPeer(uint64_t hash) {
  internal::AgreementMessage m;
  m.skeleton_hash = hash;
  m.options = "o";
  return internal::EncodeAgreementMessage(m);
}

TEST(AgreeAcrossRanksHashed, EqualHashesAgreeWithoutBuildingTheText) {
  int builds = 0;
  const HashedSkeleton skeleton{42, [&builds] {
                                  ++builds;
                                  return kSkeleton;
                                }};
  ScriptedPeers comm(3, {{HashedPeer(42), HashedPeer(42)}});
  TransferStats stats;
  EXPECT_TRUE(AgreeAcrossRanksHashed(comm, "Op", "o", skeleton, absl::OkStatus(), &stats).ok());
  EXPECT_EQ(builds, 0);
  EXPECT_EQ(stats.collectives, 1);
}

TEST(AgreeAcrossRanksHashed, ADifferentHashBuildsTheTextToNameTheLeaf) {
  int builds = 0;
  const HashedSkeleton skeleton{42, [&builds] {
                                  ++builds;
                                  return kSkeleton;
                                }};
  AgreementSkeleton theirs = kSkeleton;
  theirs[1].second = "DTensor float32[8, 4] [S(0)] on mesh (2)";
  ScriptedPeers comm(2, {{HashedPeer(7)}, {internal::EncodeSkeleton(theirs)}});
  const absl::Status s = AgreeAcrossRanksHashed(comm, "Op", "o", skeleton, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("Op: ranks disagree at 'b.w': rank 0 has DTensor bfloat16[8, 4]"));
  EXPECT_EQ(builds, 1);
  // Texts that read alike although the hashes differ.
  ScriptedPeers alike(2, {{HashedPeer(7)}, {internal::EncodeSkeleton(kSkeleton)}});
  EXPECT_THAT(std::string(AgreeAcrossRanksHashed(alike, "Op", "o", skeleton, absl::OkStatus())
                              .message()),
              HasSubstr("the skeletons of rank 0 and rank 1 hash differently"));
}

Value MeshLeaf(const std::shared_ptr<const DeviceMesh>& mesh, const std::string& placements,
               IntVector shape = {8, 4}, DType dtype = DType::kFloat32) {
  return Value(*DTensor::Make(*Tensor::Meta(IntVector(shape.size(), 0), dtype), mesh,
                              *ParsePlacements(placements), shape));
}

uint64_t DigestOf(const std::vector<std::pair<std::string, Value>>& leaves) {
  internal::SkeletonHasher hasher;
  for (const auto& [path, value] : leaves) hasher.Add(path, value);
  return hasher.Digest();
}

TEST(SkeletonHasher, LeavesThatDescribeAlikeHashAlikeAndAnyDifferenceShows) {
  const auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2, 2}));
  const auto same_mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2, 2}));
  const auto named = std::make_shared<const DeviceMesh>(
      *DeviceMesh::Create({2, 2}, {}, {"dp", "tp"}));
  const auto other_ranks =
      std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2, 2}, {0, 1, 3, 2}));
  std::vector<int64_t> many(32);
  for (int64_t i = 0; i < 32; ++i) many[i] = i;
  std::vector<int64_t> many_swapped = many;
  std::swap(many_swapped[30], many_swapped[31]);  // past the 16 ranks a description lists
  const auto big = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({32}, many));
  const auto big_swapped = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({32}, many_swapped));

  const Value plain(*Tensor::Zeros({3}, DType::kInt64));
  const uint64_t base = DigestOf({{"w", MeshLeaf(mesh, "[S(0), R]")}, {"b", plain}});
  EXPECT_EQ(DigestOf({{"w", MeshLeaf(same_mesh, "[S(0), R]")}, {"b", plain}}), base);
  for (const auto& leaves : std::vector<std::vector<std::pair<std::string, Value>>>{
           {{"v", MeshLeaf(mesh, "[S(0), R]")}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[S(1), R]")}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[_S(0, 2), R]")}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[P(sum), R]")}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[P(max), R]")}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[S(0), R]", {8, 5})}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[S(0), R]", {8, 4}, DType::kBFloat16)}, {"b", plain}},
           {{"w", MeshLeaf(named, "[S(0), R]")}, {"b", plain}},
           {{"w", MeshLeaf(other_ranks, "[S(0), R]")}, {"b", plain}},
           {{"w", MeshLeaf(mesh, "[S(0), R]")}, {"b", Value(*Tensor::Zeros({3}, DType::kInt32))}},
           {{"w", MeshLeaf(mesh, "[S(0), R]")}, {"b", Value(int64_t{3})}},
           {{"w", MeshLeaf(mesh, "[S(0), R]")}},
       }) {
    EXPECT_NE(DigestOf(leaves), base) << leaves.front().second.as_dtensor().ToString();
  }
  EXPECT_NE(DigestOf({{"w", MeshLeaf(big, "[S(0)]", {64})}}),
            DigestOf({{"w", MeshLeaf(big_swapped, "[S(0)]", {64})}}));
}

TEST(AgreementDescriber, DescribesEachKindOfLeaf) {
  const auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2}));
  internal::AgreementDescriber describe;
  EXPECT_EQ(describe(MeshLeaf(mesh, "[S(0)]")),
            "DTensor float32[8, 4] [S(0)] on DeviceMesh(cpu, 2, ranks=[0, 1])");
  EXPECT_EQ(describe(MeshLeaf(mesh, "[R]", {3})),
            "DTensor float32[3] [R] on DeviceMesh(cpu, 2, ranks=[0, 1])");
  EXPECT_EQ(describe(Value(*Tensor::Zeros({2, 3}, DType::kBFloat16))), "Tensor bfloat16[2, 3]");
  EXPECT_EQ(describe(Value(int64_t{3})), "int");
}

}  // namespace
}  // namespace sdrt
