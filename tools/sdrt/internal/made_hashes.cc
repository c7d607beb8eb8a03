#include "sdrt/tools/sdrt/internal/made_hashes.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#define XXH_INLINE_ALL  // header-only use of libxxhash-dev; the state's layout is known
#include "xxhash.h"

namespace sdrt::cli {
namespace {

using RowRange = std::pair<int64_t, int64_t>;  // [begin, end) along dim 0

// Per target rank the rows of tensor `t` it adds to the chained hash (empty for none: a
// replica of rows an earlier rank holds, or no rows), when its pieces are whole-width row
// ranges that tile it with their first holders in rank order; nullopt otherwise. The same on
// every rank: from the index alone.
std::optional<std::vector<RowRange>> RowChain(const ShardedCheckpointTensor& t,
                                              const DeviceMesh& mesh) {
  if (t.shape.empty()) return std::nullopt;
  const int64_t ranks = mesh.num_ranks();
  std::vector<RowRange> mine(static_cast<size_t>(ranks), {0, 0});
  std::map<int64_t, std::pair<int64_t, int64_t>> first;  // begin -> (end, first holder)
  for (int64_t r = 0; r < ranks; ++r) {
    absl::StatusOr<LocalShardInfo> info =
        ComputeLocalShapeAndGlobalOffset(t.shape, mesh, t.placements, r);
    if (!info.ok() || !info->is_slice) return std::nullopt;
    bool empty = false;
    for (int64_t n : info->local_shape) empty = empty || n == 0;
    if (empty) continue;
    for (size_t d = 1; d < t.shape.size(); ++d) {
      if (info->global_offset[d] != 0 || info->local_shape[d] != t.shape[d]) return std::nullopt;
    }
    const int64_t begin = info->global_offset[0], end = begin + info->local_shape[0];
    const auto [it, inserted] = first.try_emplace(begin, end, r);
    if (inserted) {
      mine[static_cast<size_t>(r)] = {begin, end};
    } else if (it->second.first != end) {
      return std::nullopt;  // overlapping ranges of different lengths
    }
  }
  int64_t at = 0, last = -1;
  for (const auto& [begin, held] : first) {
    if (begin != at || held.second <= last) return std::nullopt;
    at = held.first;
    last = held.second;
  }
  if (!first.empty() && at != t.shape[0]) return std::nullopt;
  return mine;
}

// The funnel: `positions`' tensors brought whole to rank 0, a bucket at a time, hashed there.
absl::Status HashOnRankZero(EngineIndex& e, const std::vector<size_t>& positions,
                            const Map& destination, Runner& run, int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> batches(1);
  int64_t batch_bytes = 0;
  for (size_t i : positions) {
    const ShardedCheckpointTensor& t = e.index.tensors[i];
    const int64_t bytes = BytesForElements(t.dtype, *CheckedNumel(t.shape)).value_or(0);
    if (!batches.back().empty() && batch_bytes + bytes > bucket_bytes) {
      batches.emplace_back();
      batch_bytes = 0;
    }
    batches.back().push_back(i);
    batch_bytes += bytes;
  }
  ReshardOptions options;
  options.comm = &run.data();
  options.bucket_bytes = bucket_bytes;
  for (const std::vector<size_t>& batch : batches) {
    if (batch.empty()) continue;
    Map pieces, whole;
    for (size_t i : batch) {
      const ShardedCheckpointTensor& t = e.index.tensors[i];
      if (const Value* v = destination.Find(t.name)) pieces.Set(t.name, *v);
      if (run.rank() == 0) {
        SDRT_ASSIGN_OR_RETURN(const Tensor meta, Tensor::Meta(t.shape, t.dtype));
        whole.Set(t.name, Value(meta));
      }
    }
    SDRT_RETURN_IF_ERROR(
        run.CollectiveStep([&] { return ReshardStateDict(pieces, whole, options); }));
    SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
      for (size_t i : batch) {
        if (run.rank() != 0) break;
        ShardedCheckpointTensor& t = e.index.tensors[i];
        SDRT_ASSIGN_OR_RETURN(t.xxh64, TensorXxh64(whole.Find(t.name)->as_tensor()));
      }
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HashMadeTensors(EngineIndex& e, const Map& destination, Runner& run,
                             int64_t bucket_bytes) {
  // The chained tensors and what each rank adds to their hashes; the others to rank 0.
  std::vector<size_t> chained, funnel;
  std::vector<std::vector<RowRange>> rows;
  std::set<int64_t> holders;
  for (const EngineIndex::Group& g : e.groups) {
    if (g.as_in_source) continue;
    for (size_t i : g.members) {
      std::optional<std::vector<RowRange>> chain = RowChain(e.index.tensors[i], *e.index.mesh);
      if (!chain.has_value()) {
        funnel.push_back(i);
        continue;
      }
      for (size_t r = 0; r < chain->size(); ++r) {
        if ((*chain)[r].first != (*chain)[r].second) holders.insert(static_cast<int64_t>(r));
      }
      chained.push_back(i);
      rows.push_back(*std::move(chain));
    }
  }
  // One XXH64 state per chained tensor, from holder to holder in rank order: each adds its
  // rows and broadcasts every state (a rank that fails still passes them on, and the step
  // agrees on its error after).
  std::vector<XXH64_state_t> states(chained.size());
  for (XXH64_state_t& s : states) XXH64_reset(&s, 0);
  const size_t state_bytes = states.size() * sizeof(XXH64_state_t);
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    absl::Status local;
    for (const int64_t holder : holders) {
      std::string bytes;
      if (run.rank() == holder) {
        for (size_t k = 0; k < chained.size() && local.ok(); ++k) {
          const RowRange& mine = rows[k][static_cast<size_t>(holder)];
          if (mine.first == mine.second) continue;
          const std::string& name = e.index.tensors[chained[k]].name;
          const Value* v = destination.Find(name);
          if (v == nullptr || v->kind() != ValueKind::kDTensor) {
            local = absl::InternalError(absl::StrCat("no local of '", name, "' to hash"));
            break;
          }
          absl::StatusOr<Tensor> dense = v->as_dtensor().local().Contiguous();
          if (!dense.ok()) {
            local = dense.status();
            break;
          }
          if (dense->nbytes() > 0) {
            XXH64_update(&states[k], dense->data_ptr(), static_cast<size_t>(dense->nbytes()));
          }
        }
        bytes.assign(reinterpret_cast<const char*>(states.data()), state_bytes);
      }
      SDRT_RETURN_IF_ERROR(run.data().BroadcastBytes(&bytes, static_cast<int>(holder)));
      if (bytes.size() != state_bytes) {
        return absl::InternalError("the chained hashes' states did not arrive whole");
      }
      std::memcpy(static_cast<void*>(states.data()), bytes.data(), state_bytes);
    }
    return local;
  }));
  for (size_t k = 0; k < chained.size(); ++k) {
    e.index.tensors[chained[k]].xxh64 = XXH64_digest(&states[k]);
  }
  if (funnel.empty()) return absl::OkStatus();
  SDRT_RETURN_IF_ERROR(HashOnRankZero(e, funnel, destination, run, bucket_bytes));
  std::string hashes;
  if (run.rank() == 0) {
    for (const ShardedCheckpointTensor& t : e.index.tensors) hashes += FormatXxh64(t.xxh64);
  }
  SDRT_RETURN_IF_ERROR(run.ShareFromRankZero(&hashes));
  if (hashes.size() != 16 * e.index.tensors.size()) {
    return absl::InternalError("the tensors' hashes did not reach every rank");
  }
  for (size_t i = 0; i < e.index.tensors.size(); ++i) {
    if (!absl::SimpleHexAtoi(hashes.substr(16 * i, 16), &e.index.tensors[i].xxh64)) {
      return absl::InternalError("a tensor's hash did not parse");
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::cli
