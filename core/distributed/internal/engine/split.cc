#include "sdrt/core/distributed/internal/engine/split.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// True when a slab [begin, begin + size) keeps every run on whole bytes.
bool SlabCutsWholeBytes(DType dtype, IntSpan shape, IntSpan begin, IntSpan end) {
  if (!IsSubByte(dtype)) return true;
  IntVector size(begin.size());
  for (size_t d = 0; d < begin.size(); ++d) size[d] = end[d] - begin[d];
  return FirstSubByteCut(dtype, shape, BoxRuns(begin, size)) < 0;
}

// The slabs of [begin, end) cut into `m` along `dim`, largest first.
std::vector<std::pair<IntVector, IntVector>> Slabs(IntSpan begin, IntSpan end, int dim, int64_t m) {
  std::vector<std::pair<IntVector, IntVector>> slabs;
  const int64_t length = end[dim] - begin[dim];
  int64_t at = begin[dim];
  for (int64_t i = 0; i < m; ++i) {
    const int64_t size = length / m + (i < length % m ? 1 : 0);
    IntVector b(begin.begin(), begin.end()), e(end.begin(), end.end());
    b[dim] = at;
    e[dim] = at + size;
    at += size;
    slabs.emplace_back(std::move(b), std::move(e));
  }
  return slabs;
}

}  // namespace

absl::StatusOr<int64_t> BoxBytes(DType dtype, IntSpan begin, IntSpan end) {
  int64_t numel = 1;
  for (size_t d = 0; d < begin.size(); ++d) numel *= end[d] - begin[d];
  return BytesForElements(dtype, numel);
}

absl::Status SplitAmongHolders(DType dtype, IntSpan shape,
                               const std::vector<TransferPiece>& sources,
                               absl::Span<const int> held, int destination, IntSpan begin,
                               IntSpan end, std::map<int64_t, int64_t>& sent,
                               std::vector<TransferMove>& moves) {
  const int64_t k = static_cast<int64_t>(held.size());
  if (k == 1) {  // the common case, without the slabs' and order's allocations
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BoxBytes(dtype, begin, end));
    int64_t& total = sent[sources[held[0]].rank];
    if (__builtin_add_overflow(total, bytes, &total)) {
      return absl::InvalidArgumentError("bytes sent by one rank overflow int64");
    }
    moves.push_back({held[0], destination, IntVector(begin.begin(), begin.end()),
                     IntVector(end.begin(), end.end()), bytes});
    return absl::OkStatus();
  }
  std::vector<std::pair<IntVector, IntVector>> slabs;
  if (k > 1) {
    std::vector<int> dims(begin.size());
    std::iota(dims.begin(), dims.end(), 0);
    std::stable_sort(dims.begin(), dims.end(),
                     [&](int a, int b) { return end[a] - begin[a] > end[b] - begin[b]; });
    for (int d : dims) {
      const int64_t length = end[d] - begin[d];
      if (length < 2) break;
      std::vector<std::pair<IntVector, IntVector>> cut = Slabs(begin, end, d, std::min(k, length));
      const bool whole = std::all_of(cut.begin(), cut.end(), [&](const auto& slab) {
        return SlabCutsWholeBytes(dtype, shape, slab.first, slab.second);
      });
      if (whole) {
        slabs = std::move(cut);
        break;
      }
    }
  }
  if (slabs.empty()) {
    slabs.emplace_back(IntVector(begin.begin(), begin.end()), IntVector(end.begin(), end.end()));
  }
  std::vector<int> order(held.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return sent[sources[held[a]].rank] < sent[sources[held[b]].rank];
  });
  for (size_t i = 0; i < slabs.size(); ++i) {
    const int source = held[order[i]];
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BoxBytes(dtype, slabs[i].first, slabs[i].second));
    moves.push_back(
        {source, destination, std::move(slabs[i].first), std::move(slabs[i].second), bytes});
    if (__builtin_add_overflow(sent[sources[source].rank], bytes, &sent[sources[source].rank])) {
      return absl::InvalidArgumentError("bytes sent by one rank overflow int64");
    }
  }
  return absl::OkStatus();
}

std::vector<int> RelaysByNode(const std::vector<int64_t>& needs_first,
                              const std::vector<int>& needs,
                              const std::vector<TransferPiece>& destinations,
                              const std::function<int64_t(int64_t)>& node_of) {
  std::vector<int> relay(needs.size());
  std::vector<std::pair<int64_t, int64_t>> by_node;  // (node, i), i into needs
  for (size_t cell = 0; cell + 1 < needs_first.size(); ++cell) {
    by_node.clear();
    for (int64_t i = needs_first[cell]; i < needs_first[cell + 1]; ++i) {
      by_node.emplace_back(node_of(destinations[needs[i]].rank), i);
    }
    std::sort(by_node.begin(), by_node.end());  // piece order within a node
    for (size_t run = 0; run < by_node.size();) {
      size_t next = run;
      while (next < by_node.size() && by_node[next].first == by_node[run].first) ++next;
      const int chosen = needs[by_node[run + cell % (next - run)].second];
      for (size_t j = run; j < next; ++j) relay[by_node[j].second] = chosen;
      run = next;
    }
  }
  return relay;
}

void MergeMoves(std::vector<TransferMove>& moves) {
  const int ndim = moves.empty() ? 0 : static_cast<int>(moves.front().begin.size());
  for (int dim = ndim - 1; dim >= 0; --dim) {
    // Equal but for `dim`'s interval, compared without it.
    auto key_less = [dim, ndim](const TransferMove& a, const TransferMove& b) {
      if (a.forward != b.forward) return a.forward < b.forward;
      if (a.source != b.source) return a.source < b.source;
      if (a.destination != b.destination) return a.destination < b.destination;
      for (int d = 0; d < ndim; ++d) {
        if (d == dim) continue;
        if (a.begin[d] != b.begin[d]) return a.begin[d] < b.begin[d];
        if (a.end[d] != b.end[d]) return a.end[d] < b.end[d];
      }
      return false;
    };
    std::sort(moves.begin(), moves.end(), [&](const TransferMove& a, const TransferMove& b) {
      if (key_less(a, b)) return true;
      if (key_less(b, a)) return false;
      return a.begin[dim] < b.begin[dim];
    });
    size_t kept = 0;
    for (size_t i = 0; i < moves.size(); ++i) {
      if (kept > 0) {
        TransferMove& last = moves[kept - 1];
        if (!key_less(last, moves[i]) && !key_less(moves[i], last) &&
            last.end[dim] == moves[i].begin[dim]) {
          last.end[dim] = moves[i].end[dim];
          last.bytes += moves[i].bytes;
          continue;
        }
      }
      if (kept != i) moves[kept] = std::move(moves[i]);
      ++kept;
    }
    moves.resize(kept);
  }
}

}  // namespace sdrt::internal
