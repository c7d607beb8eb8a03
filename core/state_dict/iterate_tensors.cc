// Tensor helpers of the iteration engine (core/state_dict/iterate.h): moving a tensor-like
// value to the CPU, the tensors of a tree, and a ShardedTensor's CPU form.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/state_dict/internal/tree_walker.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

absl::StatusOr<Value> MoveToCpu(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kTensor: {
      SDRT_ASSIGN_OR_RETURN(Tensor cpu, value.as_tensor().To(Device::CPU()));
      return Value(std::move(cpu));
    }
    case ValueKind::kDTensor: {
      const DTensor& dt = value.as_dtensor();
      if (dt.local().device().is_cpu()) return value;
      SDRT_ASSIGN_OR_RETURN(Tensor cpu, dt.local().To(Device::CPU()));
      SDRT_ASSIGN_OR_RETURN(DTensor out, dt.WithLocal(std::move(cpu)));
      return Value(std::move(out));
    }
    default: {
      const ShardedTensor& st = value.as_sharded();
      const bool on_cpu =
          std::all_of(st.local_shards().begin(), st.local_shards().end(),
                      [](const LocalShard& s) { return s.tensor.device().is_cpu(); });
      if (on_cpu) return value;
      std::vector<Tensor> tensors;
      for (const LocalShard& shard : st.local_shards()) {
        SDRT_ASSIGN_OR_RETURN(Tensor cpu, shard.tensor.To(Device::CPU()));
        tensors.push_back(std::move(cpu));
      }
      SDRT_ASSIGN_OR_RETURN(ShardedTensor out, ShardedOnCpu(st, std::move(tensors)));
      return Value(std::move(out));
    }
  }
}

absl::Status ForEachTensor(const Map& state_dict, const std::function<void(const Tensor&)>& fn) {
  const auto tensors_of = [&fn](const Value& value, const Map*) {
    switch (value.kind()) {
      case ValueKind::kTensor:
        fn(value.as_tensor());
        break;
      case ValueKind::kDTensor:
        fn(value.as_dtensor().local());
        break;
      case ValueKind::kShardedTensor:
        for (const LocalShard& shard : value.as_sharded().local_shards()) fn(shard.tensor);
        break;
      default:
        break;
    }
    return absl::OkStatus();
  };
  return TreeWalker<const Value>().EachLeaf(state_dict, LeafKinds::kValues, tensors_of);
}

absl::StatusOr<ShardedTensor> ShardedOnCpu(const ShardedTensor& st, std::vector<Tensor> tensors) {
  if (tensors.size() != st.local_shards().size()) {
    return absl::InvalidArgumentError(absl::StrCat("ShardedOnCpu: ", tensors.size(),
                                                   " tensors for ", st.local_shards().size(),
                                                   " local shards"));
  }
  std::vector<ShardMetadata> metadata = st.shards_metadata();
  for (ShardMetadata& m : metadata) m.placement.device = Device::CPU();
  std::vector<LocalShard> shards = st.local_shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    shards[i].tensor = std::move(tensors[i]);
    shards[i].metadata.placement.device = Device::CPU();
  }
  return ShardedTensor::Make(st.global_shape(), st.dtype(), std::move(metadata), std::move(shards));
}

}  // namespace sdrt::internal
