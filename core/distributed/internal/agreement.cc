#include "sdrt/core/distributed/internal/agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/tensor/status_macros.h"
#define XXH_INLINE_ALL  // header-only use of libxxhash-dev
#include "xxhash.h"

namespace sdrt::internal {
namespace {

constexpr size_t kHeader = sizeof(uint64_t) + sizeof(int32_t);

uint64_t HashSkeleton(const Skeleton& skeleton) {
  // Length-prefixed paths and descriptions, hashed in one call.
  std::string bytes;
  for (const auto& [path, description] : skeleton) {
    const uint64_t sizes[2] = {path.size(), description.size()};
    bytes.append(reinterpret_cast<const char*>(sizes), sizeof(sizes));
    bytes += path;
    bytes += description;
  }
  return XXH64(bytes.data(), bytes.size(), 0);
}

}  // namespace

std::string DescribeForAgreement(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kTensor: {
      const Tensor& t = value.as_tensor();
      return absl::StrCat("Tensor ", DTypeName(t.dtype()), ShapeToString(t.shape()));
    }
    case ValueKind::kDTensor: {
      const DTensor& d = value.as_dtensor();
      return absl::StrCat("DTensor ", DTypeName(d.dtype()), ShapeToString(d.global_shape()), " ",
                          PlacementsToString(d.placements()), " on ",
                          d.mesh() == nullptr ? "no mesh" : d.mesh()->ToString());
    }
    case ValueKind::kShardedTensor: {
      const ShardedTensor& s = value.as_sharded();
      return absl::StrCat("ShardedTensor ", DTypeName(s.dtype()), ShapeToString(s.global_shape()));
    }
    default:
      return std::string(ValueKindName(value.kind()));
  }
}

absl::Status AgreeAcrossRanks(Communicator& comm, absl::string_view op, const Skeleton& skeleton,
                              const absl::Status& local_error, CollectiveStats* stats) {
  std::string mine(kHeader, '\0');
  const uint64_t hash = HashSkeleton(skeleton);
  const int32_t code = static_cast<int32_t>(local_error.code());
  std::memcpy(mine.data(), &hash, sizeof(hash));
  std::memcpy(mine.data() + sizeof(hash), &code, sizeof(code));
  mine.append(local_error.message().data(), local_error.message().size());
  if (stats != nullptr) ++stats->collectives;
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> all, comm.AllGatherBytes(mine));

  std::vector<std::string> errors;
  absl::StatusCode first_code = absl::StatusCode::kOk;
  int differing = -1;
  uint64_t hash0 = 0;
  for (int q = 0; q < comm.size(); ++q) {
    const std::string& m = all[q];
    uint64_t h = 0;
    int32_t c = 0;
    std::memcpy(&h, m.data(), sizeof(h));
    std::memcpy(&c, m.data() + sizeof(h), sizeof(c));
    if (q == 0) hash0 = h;
    if (h != hash0 && differing < 0) differing = q;
    if (c != 0) {
      if (first_code == absl::StatusCode::kOk) first_code = static_cast<absl::StatusCode>(c);
      if (errors.size() < 4) {
        errors.push_back(absl::StrCat("rank ", q, ": ", absl::string_view(m).substr(kHeader)));
      }
    }
  }
  if (!errors.empty()) {
    return absl::Status(first_code, absl::StrCat(op, ": ", absl::StrJoin(errors, "; ")));
  }
  if (differing < 0) return absl::OkStatus();

  // Second exchange, only on a mismatch: the skeletons themselves, to name the difference.
  std::string encoded;
  if (comm.rank() == 0 || comm.rank() == differing) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& [path, description] : skeleton) j.push_back({path, description});
    const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(j);
    encoded.assign(cbor.begin(), cbor.end());
  }
  if (stats != nullptr) ++stats->collectives;
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> skeletons, comm.AllGatherBytes(encoded));
  const nlohmann::json a = nlohmann::json::from_cbor(skeletons[0]);
  const nlohmann::json b = nlohmann::json::from_cbor(skeletons[differing]);
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string pa = i < a.size() ? a[i][0].get<std::string>() : "";
    const std::string pb = i < b.size() ? b[i][0].get<std::string>() : "";
    const std::string da = i < a.size() ? a[i][1].get<std::string>() : "nothing";
    const std::string db = i < b.size() ? b[i][1].get<std::string>() : "nothing";
    if (pa == pb && da == db) continue;
    if (pa == pb) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ranks disagree at '", pa,
                                                     "': rank 0 has ", da, ", rank ", differing,
                                                     " has ", db));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ranks disagree on the keys: leaf ", i, " is ",
        i < a.size() ? absl::StrCat("'", pa, "' (", da, ")") : "missing", " on rank 0 but ",
        i < b.size() ? absl::StrCat("'", pb, "' (", db, ")") : "missing", " on rank ", differing));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": the skeletons of rank 0 and rank ", differing, " hash differently"));
}

}  // namespace sdrt::internal
