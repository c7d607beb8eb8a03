#include "sdrt/core/distributed/internal/engine/split.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

#include "absl/container/inlined_vector.h"
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

using Slab = std::pair<IntVector, IntVector>;

// How a box is cut into slabs: `count` slabs along `dim` (count 1: the whole box).
struct SlabCut {
  int dim = 0;
  int64_t count = 1;
};

// Slabs [from, to) of [begin, end) cut by `cut`, as one box: slab i is length / count
// indices long, plus one for the first length % count, so the larger ones come first.
Slab SlabRange(IntSpan begin, IntSpan end, SlabCut cut, int64_t from, int64_t to) {
  IntVector b(begin.begin(), begin.end()), e(end.begin(), end.end());
  if (cut.count > 1) {
    const int64_t length = end[cut.dim] - begin[cut.dim];
    const int64_t size = length / cut.count, extra = length % cut.count;
    b[cut.dim] = begin[cut.dim] + from * size + std::min(from, extra);
    e[cut.dim] = begin[cut.dim] + to * size + std::min(to, extra);
  }
  return {std::move(b), std::move(e)};
}

// The cut of [begin, end) into min(m, length) slabs along its longest dim whose slabs keep
// whole bytes (see SplitAmongHolders); count 1 when m < 2 or no dim can be cut.
SlabCut ChooseCut(DType dtype, IntSpan shape, IntSpan begin, IntSpan end, int64_t m) {
  if (m < 2) return {};
  std::vector<int> dims(begin.size());
  std::iota(dims.begin(), dims.end(), 0);
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int a, int b) { return end[a] - begin[a] > end[b] - begin[b]; });
  for (int d : dims) {
    const int64_t length = end[d] - begin[d];
    if (length < 2) break;
    const SlabCut cut{d, std::min(m, length)};
    if (!IsSubByte(dtype)) return cut;
    bool whole = true;
    for (int64_t i = 0; whole && i < cut.count; ++i) {
      const Slab slab = SlabRange(begin, end, cut, i, i + 1);
      whole = SlabCutsWholeBytes(dtype, shape, slab.first, slab.second);
    }
    if (whole) return cut;
  }
  return {};
}

}  // namespace

absl::StatusOr<int64_t> BoxBytes(DType dtype, IntSpan begin, IntSpan end) {
  int64_t numel = 1;
  for (size_t d = 0; d < begin.size(); ++d) numel *= end[d] - begin[d];
  return BytesForElements(dtype, numel);
}

namespace {

// Gives `slabs` (largest first) to the holders `held` in increasing order of what their
// ranks have sent (ties: holder order), one each (cycling when there are more slabs than
// holders); updates `sent`.
absl::Status AssignSlabs(const SideOutline& sources, absl::Span<const int> held, int destination,
                         const std::vector<HolderSlab>& slabs, std::vector<int64_t>& sent,
                         std::vector<PlannedMove>& moves) {
  const auto give = [&](int source, const HolderSlab& slab) {
    moves.push_back({source, destination, slab.begin.data(), slab.end.data(), slab.bytes});
    int64_t& total = sent[static_cast<size_t>(sources[source].rank)];
    return !__builtin_add_overflow(total, slab.bytes, &total);
  };
  const auto overflow = [] {
    return absl::InvalidArgumentError("bytes sent by one rank overflow int64");
  };
  if (slabs.size() == 1) {  // the whole cell (a box's replicas in turn): the least-sent first
    size_t least = 0;
    for (size_t i = 1; i < held.size(); ++i) {
      if (sent[static_cast<size_t>(sources[held[i]].rank)] <
          sent[static_cast<size_t>(sources[held[least]].rank)]) {
        least = i;
      }
    }
    return give(held[least], slabs.front()) ? absl::OkStatus() : overflow();
  }
  // (sent, holder index), the first min(slabs, holders) of them in order: one lookup of
  // `sent` per holder, not per comparison (the keys are distinct: any sort gives one order).
  absl::InlinedVector<std::pair<int64_t, int>, 16> order(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    order[i] = {sent[static_cast<size_t>(sources[held[i]].rank)], static_cast<int>(i)};
  }
  const size_t used = std::min(slabs.size(), order.size());
  if (order.size() <= 16) {
    std::sort(order.begin(), order.end());
  } else {
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(used),
                      order.end());
  }
  for (size_t i = 0; i < slabs.size(); ++i) {
    if (!give(held[order[i % used].second], slabs[i])) return overflow();
  }
  return absl::OkStatus();
}

// Appends slabs [from, to) of `cut` of [begin, end) to `out`, with their bytes.
absl::Status AddSlabs(DType dtype, IntSpan begin, IntSpan end, SlabCut cut, int64_t from,
                      int64_t to, std::vector<HolderSlab>& out) {
  for (int64_t i = from; i < to; ++i) {
    Slab slab = SlabRange(begin, end, cut, i, i + 1);
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BoxBytes(dtype, slab.first, slab.second));
    out.push_back({std::move(slab.first), std::move(slab.second), bytes});
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitAmongHolders(DType dtype, IntSpan shape, const SideOutline& sources,
                               absl::Span<const int> held, int destination, int64_t replicas,
                               IntSpan begin, IntSpan end, HolderSlabs& slabs,
                               std::vector<int64_t>& sent, std::vector<PlannedMove>& moves) {
  const int64_t k = static_cast<int64_t>(held.size());
  if (k == 1) {  // the common case, without the slabs' and order's allocations
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BoxBytes(dtype, begin, end));
    int64_t& total = sent[static_cast<size_t>(sources[held[0]].rank)];
    if (__builtin_add_overflow(total, bytes, &total)) {
      return absl::InvalidArgumentError("bytes sent by one rank overflow int64");
    }
    moves.push_back({held[0], destination, begin.data(), end.data(), bytes});
    return absl::OkStatus();
  }
  // Slabs per piece so that the replicas' slabs are a multiple of the holders: one (the
  // whole cell) when the replicas are, as many as the holders when they share no factor.
  const int64_t count = k / std::gcd(k, std::max<int64_t>(replicas, 1));
  if (slabs.count != count) {
    slabs.count = 0;
    slabs.slabs.clear();
    const SlabCut cut = ChooseCut(dtype, shape, begin, end, count);
    SDRT_RETURN_IF_ERROR(AddSlabs(dtype, begin, end, cut, 0, cut.count, slabs.slabs));
    slabs.count = count;
  }
  return AssignSlabs(sources, held, destination, slabs.slabs, sent, moves);
}

absl::Status FanOutCell(DType dtype, IntSpan shape, const SideOutline& sources,
                        const SideOutline& destinations, absl::Span<const int> held,
                        absl::Span<const int> group, int destination, int64_t cell, bool cut,
                        IntSpan begin, IntSpan end, FanOutScratch& scratch,
                        std::vector<int64_t>& sent, std::vector<PlannedMove>& moves) {
  const int64_t members = static_cast<int64_t>(group.size());
  const auto on_relay_rank = [&](int relay) {
    return relay == destination || destinations[relay].rank == destinations[destination].rank;
  };
  if (!cut) {  // the whole cell: from the holders as without nodes, or from its relay
    const int relay = group[static_cast<size_t>(cell % members)];
    if (on_relay_rank(relay)) {
      scratch.whole.count = 0;  // cut for this cell
      return SplitAmongHolders(dtype, shape, sources, held, destination, /*replicas=*/1, begin, end,
                               scratch.whole, sent, moves);
    }
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BoxBytes(dtype, begin, end));
    moves.push_back({relay, destination, begin.data(), end.data(), bytes, /*forward=*/true});
    return absl::OkStatus();
  }
  const SlabCut slabs =
      ChooseCut(dtype, shape, begin, end, std::max(static_cast<int64_t>(held.size()), members));
  std::vector<HolderSlab>& taken = scratch.taken;  // the slabs this piece takes from the holders
  std::vector<HolderSlab>& blocks = scratch.blocks;
  std::vector<int>& relays = scratch.relays;  // of the blocks
  taken.clear();
  blocks.clear();
  relays.clear();
  for (int64_t j = 0; j < members; ++j) {
    // Block j: the slabs i with i x members / count == j.
    const int64_t from = (j * slabs.count + members - 1) / members;
    const int64_t to = ((j + 1) * slabs.count + members - 1) / members;
    if (from == to) continue;
    const int relay = group[static_cast<size_t>((j + cell) % members)];
    if (on_relay_rank(relay)) {
      SDRT_RETURN_IF_ERROR(AddSlabs(dtype, begin, end, slabs, from, to, taken));
      continue;
    }
    Slab block = SlabRange(begin, end, slabs, from, to);
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BoxBytes(dtype, block.first, block.second));
    blocks.push_back({std::move(block.first), std::move(block.second), bytes});
    relays.push_back(relay);
  }
  for (size_t b = 0; b < blocks.size(); ++b) {  // the blocks stay put from here on
    moves.push_back({relays[b], destination, blocks[b].begin.data(), blocks[b].end.data(),
                     blocks[b].bytes, /*forward=*/true});
  }
  // Largest first, as AssignSlabs takes them (the larger slabs come first).
  return AssignSlabs(sources, held, destination, taken, sent, moves);
}

NodeGroups GroupByNode(const std::vector<int64_t>& needs_first, const std::vector<int>& needs,
                       const SideOutline& destinations,
                       const std::function<int64_t(int64_t)>& node_of) {
  NodeGroups groups;
  groups.members.resize(needs.size());
  groups.first.resize(needs.size());
  groups.count.resize(needs.size());
  groups.shared.resize(needs_first.empty() ? 0 : needs_first.size() - 1);
  std::vector<std::pair<int64_t, int>> by_node;  // (node, i), i into needs
  for (size_t cell = 0; cell + 1 < needs_first.size(); ++cell) {
    by_node.clear();
    for (int64_t i = needs_first[cell]; i < needs_first[cell + 1]; ++i) {
      by_node.emplace_back(node_of(destinations[needs[i]].rank), static_cast<int>(i));
    }
    // Piece order within a node; usually sorted already (pieces in rank order, nodes too).
    if (!std::is_sorted(by_node.begin(), by_node.end())) std::sort(by_node.begin(), by_node.end());
    const int base = static_cast<int>(needs_first[cell]);
    for (size_t run = 0; run < by_node.size();) {
      size_t next = run;
      while (next < by_node.size() && by_node[next].first == by_node[run].first) ++next;
      for (size_t j = run; j < next; ++j) {
        groups.members[base + j] = needs[by_node[j].second];
        groups.first[by_node[j].second] = base + static_cast<int>(run);
        groups.count[by_node[j].second] = static_cast<int>(next - run);
      }
      if (next - run > 1) groups.shared[cell] = 1;
      run = next;
    }
  }
  return groups;
}

void MergeAdjacentBoxes(std::vector<TransferMove>& moves) {
  const int ndim = static_cast<int>(moves.front().begin.size());
  for (int dim = ndim - 1; dim >= 0; --dim) {
    // Equal but for `dim`'s interval, compared without it.
    auto key_less = [dim, ndim](const TransferMove& a, const TransferMove& b) {
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

void MergeMoves(std::vector<TransferMove>& moves) {
  // Only moves of one (forward, source, destination) merge: find those groups by sorting
  // indices, and sort the moves themselves only within a group of more than one.
  const auto group_of = [&moves](uint32_t i) {
    return std::make_tuple(moves[i].forward, moves[i].source, moves[i].destination);
  };
  std::vector<uint32_t> order(moves.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::make_pair(group_of(a), a) < std::make_pair(group_of(b), b);
  });
  const auto same = [&](uint32_t a, uint32_t b) { return group_of(a) == group_of(b); };
  if (std::adjacent_find(order.begin(), order.end(), same) == order.end()) return;
  std::vector<TransferMove> merged, group;
  merged.reserve(moves.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && same(order[i], order[j])) ++j;
    group.clear();
    for (size_t k = i; k < j; ++k) group.push_back(std::move(moves[order[k]]));
    if (j - i > 1) MergeAdjacentBoxes(group);
    for (TransferMove& move : group) merged.push_back(std::move(move));
    i = j;
  }
  moves = std::move(merged);
}

}  // namespace sdrt::internal
