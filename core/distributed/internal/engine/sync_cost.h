// What a weight sync costs on a cluster of GPUs, predicted from a whole world's plan
// (plan.h, every rank's messages kept) by a stated model, for `sdrt simulate` (issue 34):
// the engine's own schedule (schedule.h) run through queues of links, and the two schemes
// people use instead, priced by formulas on the same links. Nothing moves. Not public API.
//
// The links. Rank r is on node r / gpus_per_node. Each rank has four queues: NVLink send and
// receive (to and from ranks of its node), NIC send and receive (to and from other nodes:
// one NIC per GPU, as on HGX machines). A message of b bytes between ranks of one node
// takes b / nvlink seconds of the sender's NVLink send queue and of the receiver's NVLink
// receive queue, between nodes b / nic seconds of the two NIC queues; each queue serves
// its messages one after another in the order they become ready (so that the bytes
// through one port add up, as flows sharing it fairly do), and a message arrives
// `latency` seconds after both of its queues have served it.
//
// The engine, as its program runs (program.h): each rank runs its schedule's exchanges in
// order. An exchange packs what it sends (and its chunks to itself) into a send bucket at
// `copy` bytes per second, then its messages move (a message is ready when its sender has
// posted the exchange and its receiver has reached the exchange that receives it), then it
// unpacks what it received, and the next exchange starts. A rank that packs for more than
// one exchange packs the next exchange into its other send bucket while this one's
// messages move (not the first exchange of forwards): an exchange then ends when both its
// messages and that packing are done. A rank's chunks that all go to itself are copied
// before its first exchange. The buckets and units are ScheduleTransfer's, with
// kDeviceChunkAlignment.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SYNC_COST_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SYNC_COST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// The machines: bandwidths in bytes per second (each direction), latency in seconds.
struct ClusterLinks {
  int64_t nodes = 1;
  int64_t gpus_per_node = 1;
  double nvlink = 450e9;   // per GPU, between GPUs of one node (H100/H200 NVLink 4)
  double nic = 50e9;       // per GPU, between nodes (one 400 Gb/s NIC per GPU)
  double latency = 10e-6;  // per message
  double copy = 1000e9;    // packing and unpacking on the GPU (device to device copies)
  // The executor runs on the CPU (MPI; `sdrt bench`'s links on one machine): a message of
  // one dense box of at least kDirectRangeBytes goes on the wire from its local and into
  // its local, unpacked (pack.h, DirectRange), as the host program does; and a message is
  // copied in by its receiver's thread (shared memory), which does so only once done with
  // the packing it started ahead.
  bool host = false;
};

struct SyncPrediction {
  double seconds = 0;  // when the last rank's last exchange ends
  // The busiest queue of each kind (send or receive) and its bytes / bandwidth: no
  // schedule can end before the busiest queue has moved its bytes.
  int64_t max_nic_bytes = 0;
  int64_t max_nvlink_bytes = 0;
  double busiest_link_seconds = 0;
  int64_t max_exchanges = 0;  // the most exchanges of one rank
  int64_t messages = 0;       // wire messages (units) of every rank
};

// InvalidArgument unless the links are a cluster: nodes and gpus_per_node >= 1 with at most
// kMaxMeshRanks GPUs, bandwidths > 0, latency >= 0. Both predictions below check it.
absl::Status CheckClusterLinks(const ClusterLinks& links);

// Runs the schedule of every rank of `plan` (a plan of every rank: TransferPlan::rank -1)
// with `bucket_bytes` through the model above (the schedules made on up to 32 threads, the
// run itself on the calling thread; the result does not depend on the threads).
// InvalidArgument for a plan of one rank, a plan with collective layouts (not modelled),
// links that fail CheckClusterLinks or lack the world's ranks (nodes x gpus_per_node <
// world); ScheduleTransfer's errors; Internal
// when the schedules cannot complete (a message no exchange receives).
absl::StatusOr<SyncPrediction> PredictSync(const TransferPlan& plan, const ClusterLinks& links,
                                           int64_t bucket_bytes);

// The two schemes people use instead, for the same tensors and layouts (the same plan):
//  * funnel: as PyTorch's gather then broadcast of a state dict, tensor by tensor: rank 0
//    receives the bytes of each tensor it does not hold (what node 0's ranks hold over
//    NVLink, the rest over its NIC, both at once), then broadcasts the whole tensor to every
//    destination rank (a pipelined broadcast: bytes / the slowest link on its way, the NIC
//    when the destinations span nodes, plus latency x ceil(log2 ranks)).
//  * bucketed broadcast of full tensors (MoonshotAI's checkpoint-engine): every byte of the
//    model (each tensor once, in the plan's wire dtype) is broadcast from the rank holding it
//    to every destination rank in buckets of `bucket_bytes`, loading the next bucket while
//    the last one moves: the sum of bytes / the broadcast's bandwidth (as above), latency x
//    ceil(log2 ranks) per bucket, and one bucket's copy to start the pipeline.
struct BaselinePredictions {
  double funnel_seconds = 0;
  double bucketed_broadcast_seconds = 0;
};
absl::StatusOr<BaselinePredictions> PredictBaselines(const TransferPlan& plan,
                                                     const ClusterLinks& links,
                                                     int64_t bucket_bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SYNC_COST_H_
