// sdrt/c_api.h: sdrt_offload (CreateCpuStateDict + CopyStateDict).
#include <memory>
#include <utility>

#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

extern "C" {

sdrt_status_t sdrt_offload(sdrt_state_dict_t state_dict, const sdrt_offload_options_t* options,
                           sdrt_state_dict_t* out) {
  return Guard("sdrt_offload", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_ASSIGN_OR_RETURN(c_api::StateDictObject * sd, c_api::Resolve(state_dict, "state_dict"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_offload_options_t o =
        options != nullptr ? *options : sdrt_offload_options_t SDRT_OFFLOAD_OPTIONS_INIT;
    sdrt::CreateCpuOptions co;
    co.pin_memory = o.pin_memory != 0;
    co.share_memory = o.share_memory != 0;
    SDRT_ASSIGN_OR_RETURN(sdrt::Map cpu, sdrt::CreateCpuStateDict(sd->map, co));
    sdrt::CopyOptions copy;
    copy.stream = o.stream;  // enqueued after the work already on it; blocking
    SDRT_ASSIGN_OR_RETURN(sdrt::CopyResult copied, sdrt::CopyStateDict(sd->map, cpu, copy));
    (void)copied;
    int64_t bytes = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      const sdrt::Value& v = cpu.value(i);
      if (v.kind() == sdrt::ValueKind::kTensor) bytes += v.as_tensor().nbytes();
      if (v.kind() == sdrt::ValueKind::kDTensor) bytes += v.as_dtensor().local().nbytes();
    }
    scope.stats().bytes_written = bytes;
    auto object = std::make_unique<c_api::StateDictObject>();
    object->map = std::move(cpu);
    *out = c_api::NewHandle<sdrt_state_dict_t>(std::move(object));
    return absl::OkStatus();
  });
}

}  // extern "C"
