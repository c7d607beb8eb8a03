#include "sdrt/core/distributed/internal/engine/schedule_units.h"

#include <algorithm>

#include "sdrt/core/distributed/internal/engine/pack.h"

namespace sdrt::internal {
namespace {

// The slot of the (sender, receiver) pair of a chunk or unit of rank `me`: 2 x its peer +
// (whether `me` sends), one side of each being `me`.
size_t PairSlot(int64_t me, int64_t source_rank, int64_t destination_rank) {
  const bool sends = source_rank == me;
  return static_cast<size_t>(2 * (sends ? destination_rank : source_rank) + (sends ? 1 : 0));
}

}  // namespace

void AppendUnits(absl::Span<const TransferSchedule::Step> steps, int64_t bucket,
                 absl::Span<const size_t> group_starts_in_steps,
                 absl::Span<const uint8_t> groups_interleave, TransferSchedule& schedule,
                 std::vector<size_t>& group_starts, std::vector<uint8_t>& interleave) {
  const int64_t align = schedule.chunk_alignment;
  const int64_t me = schedule.rank;
  struct Building {
    int64_t bytes = 0;
    int64_t source_rank = 0;
    int64_t destination_rank = 0;
    size_t count = 0;
  };
  std::vector<Building> units;
  std::vector<uint32_t> unit_of(steps.size());  // each step's unit
  // The open unit + 1 (0: none) of each pair, at 2 x peer + (whether this rank sends): one
  // side of every chunk here is this rank. `touched`: the slots to clear at a group's start.
  std::vector<size_t> open;
  std::vector<size_t> touched;
  auto next_group = group_starts_in_steps.begin();
  for (size_t k = 0; k < steps.size(); ++k) {
    if (next_group != group_starts_in_steps.end() && *next_group <= k) {
      // A new exchange group: no unit is joined across its start.
      while (next_group != group_starts_in_steps.end() && *next_group <= k) ++next_group;
      for (const size_t slot : touched) open[slot] = 0;
      touched.clear();
      group_starts.push_back(schedule.units.size() + units.size());
      interleave.push_back(
          groups_interleave[static_cast<size_t>(next_group - group_starts_in_steps.begin()) - 1]);
    }
    const TransferMessage& c = *steps[k].chunk;
    if (c.source_rank != c.destination_rank && c.contribution == 0 && c.bytes < kDirectRangeBytes) {
      const size_t at = PairSlot(me, c.source_rank, c.destination_rank);
      if (at >= open.size()) open.resize(at + 1, 0);
      size_t& slot = open[at];
      if (slot != 0 && AlignUp(units[slot - 1].bytes, align) + c.bytes <= bucket) {
        Building& u = units[slot - 1];
        u.bytes = AlignUp(u.bytes, align) + c.bytes;
        ++u.count;
        unit_of[k] = static_cast<uint32_t>(slot - 1);
        continue;
      }
      if (slot == 0) touched.push_back(at);
      slot = units.size() + 1;
    }
    unit_of[k] = static_cast<uint32_t>(units.size());
    units.push_back({c.bytes, c.source_rank, c.destination_rank, 1});
  }
  // Each unit's steps together, in the order they joined it.
  std::vector<size_t> next(units.size());
  size_t at = schedule.steps.size();
  for (size_t u = 0; u < units.size(); ++u) {
    next[u] = at;
    schedule.units.push_back(
        {at, units[u].count, units[u].bytes, units[u].source_rank, units[u].destination_rank});
    at += units[u].count;
  }
  schedule.steps.resize(at);
  for (size_t k = 0; k < steps.size(); ++k) schedule.steps[next[unit_of[k]]++] = steps[k];
}

void InterleavePairs(int64_t me, size_t first, size_t end, TransferSchedule& schedule,
                     std::vector<uint32_t>& nth, std::vector<uint32_t>& counters) {
  std::vector<TransferSchedule::Unit>& units = schedule.units;
  nth.resize(end - first);
  uint32_t rounds = 0;
  for (size_t u = first; u < end; ++u) {
    const size_t at = PairSlot(me, units[u].source_rank, units[u].destination_rank);
    if (at >= counters.size()) counters.resize(at + 1, 0);
    nth[u - first] = counters[at]++;
    rounds = std::max(rounds, nth[u - first] + 1);
  }
  for (size_t u = first; u < end; ++u) {
    counters[PairSlot(me, units[u].source_rank, units[u].destination_rank)] = 0;
  }
  if (rounds <= 1) return;
  // A counting sort by round, stable.
  std::vector<size_t> at(rounds + 1, 0);
  for (const uint32_t n : nth) ++at[n + 1];
  for (uint32_t r = 0; r < rounds; ++r) at[r + 1] += at[r];
  std::vector<TransferSchedule::Unit> sorted(end - first);
  for (size_t u = first; u < end; ++u) sorted[at[nth[u - first]]++] = units[u];
  std::copy(sorted.begin(), sorted.end(), units.begin() + static_cast<ptrdiff_t>(first));
}

}  // namespace sdrt::internal
