// The units of a rank's schedule (schedule.h): its chunks joined into wire messages, and
// the order of each exchange group's units. Parts of ScheduleTransfer. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SCHEDULE_UNITS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SCHEDULE_UNITS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"

namespace sdrt::internal {

// Appends the units of one phase's chunks `steps` (in the exchange order, each exchange
// group from its index in `group_starts_in_steps` on) to `schedule`, noting in
// `group_starts` the units that open a group and in `interleave` that group's flag of
// `groups_interleave` (one per entry of `group_starts_in_steps`): a wire chunk of
// contribution 0 under kDirectRangeBytes joins the open unit of its (sender,
// receiver) pair while that stays within `bucket` bytes, else opens the pair's next unit
// at its own place (each chunk of a unit on `chunk_alignment` bytes); a chunk to itself, a later
// Partial contribution and a large chunk (which may go on the wire from its local, DirectRange) are
// units of their own. Joining only moves a contribution-0 chunk earlier, which its destination
// allows: those chunks write disjoint elements, and a later contribution, reduced into them, comes
// after them in the order (a tensor's chunks are in one group, in the plan's message order).
void AppendUnits(absl::Span<const TransferSchedule::Step> steps, int64_t bucket,
                 absl::Span<const size_t> group_starts_in_steps,
                 absl::Span<const uint8_t> groups_interleave, TransferSchedule& schedule,
                 std::vector<size_t>& group_starts, std::vector<uint8_t>& interleave);

// Reorders units [first, end) of `schedule` (one exchange group of one phase) by their place
// among the units of their (sender, receiver) pair, the first unit of every pair first, then
// every second one, each round in the order before: the same order on every rank, since
// both ranks of a pair list its units alike and every rank lists the group's units in one
// order. Cutting the group into exchanges in this order (ScheduleTransfer) puts the first
// units of all of a rank's pairs in its first exchange, both ways at once, where the order
// before would cut a rank's receipts from one peer and its sends to another into exchanges
// one after the other. `nth` and `counters` are scratch.
void InterleavePairs(int64_t me, size_t first, size_t end, TransferSchedule& schedule,
                     std::vector<uint32_t>& nth, std::vector<uint32_t>& counters);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SCHEDULE_UNITS_H_
