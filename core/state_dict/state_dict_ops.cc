// OffloadStateDictToCpu, CopyStateDict and the similarity check (core/state_dict/state_dict_ops.h),
// thin wrappers over the iteration engine. CreateCpuStateDict is in
// create_cpu_state_dict.cc.
#include "sdrt/core/state_dict/state_dict_ops.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// `status` with `op` in front of its message, except for companion mismatches, whose
// message keeps its distinctive start "companion mismatch at <path>".
absl::Status Named(absl::string_view op, const absl::Status& status) {
  if (status.ok() || internal::IsCompanionMismatch(status)) return status;
  return absl::Status(status.code(), absl::StrCat(op, ": ", status.message()));
}

// Similarity's tensor visitor. The engine checks kinds, shapes and dtypes against a
// companion; a None companion, which the engine takes as "no companion", is a difference
// for a plain tensor (PyTorch fails reading its dtype, docs/SEMANTICS.md 11.8).
absl::StatusOr<Value> CompareTensor(const Tensor& t, const Value* companion) {
  if (companion == nullptr) {
    return internal::CompanionMismatch(internal::KindsDiffer(Value(t), Value()));
  }
  return Value(t);
}

}  // namespace

bool IsCompanionMismatch(const absl::Status& status) {
  return internal::IsCompanionMismatch(status);
}

absl::StatusOr<Map> OffloadStateDictToCpu(const Map& state_dict, const OffloadOptions& options) {
  internal::IterateOptions iterate;
  iterate.rank = options.rank;
  iterate.ranks_only = options.ranks_only;
  iterate.cpu_offload = true;
  iterate.type_check = options.type_check;
  absl::StatusOr<Map> out =
      internal::IterateStateDict(state_dict, internal::IdentityVisitors(), nullptr, iterate);
  if (!out.ok()) return Named("OffloadStateDictToCpu", out.status());
  return out;
}

absl::StatusOr<CopyResult> CopyStateDict(const Map& src, const Map& dst,
                                         const CopyOptions& options) {
  std::set<int> cuda_devices;
  const auto note_device = [&](const Tensor& t) {
    if (t.device().is_cuda()) cuda_devices.insert(t.device().index);
  };
  // Only the choice of non_blocking depends on the devices found: a tree nested too deep
  // is reported by the engine below (or needs no copy: a companion under a None source).
  for (const Map* map : {&src, &dst}) (void)internal::ForEachTensor(*map, note_device);

  internal::IterateOptions iterate;
  iterate.type_check = options.type_check;
  iterate.non_blocking = options.non_blocking && cuda_devices.size() == 1;
  iterate.stream = options.stream;
  absl::StatusOr<Map> out =
      internal::IterateStateDict(src, internal::IdentityVisitors(), &dst, iterate);
  if (!out.ok()) return Named("CopyStateDict", out.status());
  CopyResult result{*std::move(out), nullptr};
  if (iterate.non_blocking) {
    // On the copies' device, so that Record(nullptr) is on that device's default stream.
    SDRT_ASSIGN_OR_RETURN(CudaEvent event,
                          CudaEvent::Create(*cuda_devices.begin(), EventTiming::kDisabled));
    SDRT_RETURN_IF_ERROR(event.Record(options.stream));
    result.done = std::make_shared<CudaEvent>(std::move(event));
  }
  return result;
}

absl::Status CompareStateDicts(const Map& a, const Map& b) {
  internal::IterateVisitors visitors = internal::IdentityVisitors();
  visitors.tensor = CompareTensor;
  internal::IterateOptions iterate;
  iterate.type_check = false;
  iterate.copy_into_companion = false;
  return Named("CompareStateDicts", internal::IterateStateDict(a, visitors, &b, iterate).status());
}

bool CheckStateDictSimilarity(const Map& a, const Map& b) { return CompareStateDicts(a, b).ok(); }

}  // namespace sdrt
