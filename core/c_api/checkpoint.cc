// sdrt/c_api.h: checkpoints (CheckpointSource: every kind, an sdrt sharded folder included).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

c_api::CheckpointObject::Info InfoOf(const std::string& name, sdrt::DType dtype, int64_t nbytes,
                                     const sdrt::IntVector& shape) {
  c_api::CheckpointObject::Info info;
  info.name = name;
  const sdrt::DLPackType dl = sdrt::ToDLPackType(dtype);
  info.dtype = DLDataType{dl.code, dl.bits, 1};
  info.dtype_name = std::string(sdrt::DTypeName(dtype));
  info.shape.assign(shape.begin(), shape.end());
  info.nbytes = nbytes;
  return info;
}

}  // namespace

extern "C" {

sdrt_status_t sdrt_checkpoint_open(const char* path, sdrt_checkpoint_t* out) {
  return Guard("sdrt_checkpoint_open", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(path, "path"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_ASSIGN_OR_RETURN(sdrt::CheckpointSource source, sdrt::CheckpointSource::Open(path));
    auto handle = std::make_unique<c_api::CheckpointObject>();
    for (const sdrt::CheckpointSourceTensor& t : source.tensors()) {
      handle->infos.push_back(InfoOf(t.name, t.dtype, t.nbytes, t.shape));
    }
    handle->source.emplace(std::move(source));
    *out = c_api::NewHandle<sdrt_checkpoint_t>(std::move(handle));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_checkpoint_kind(sdrt_checkpoint_t checkpoint, sdrt_checkpoint_kind_t* kind) {
  return Guard("sdrt_checkpoint_kind", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::CheckpointObject * ckpt, c_api::Resolve(checkpoint, "checkpoint"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(kind, "kind"));
    switch (ckpt->source->kind()) {
      case sdrt::CheckpointKind::kSafetensorsFile: *kind = SDRT_CHECKPOINT_SAFETENSORS_FILE; break;
      case sdrt::CheckpointKind::kHfFolder: *kind = SDRT_CHECKPOINT_HF_FOLDER; break;
      case sdrt::CheckpointKind::kSafetensorsFolder:
        *kind = SDRT_CHECKPOINT_SAFETENSORS_FOLDER;
        break;
      case sdrt::CheckpointKind::kShardedFolder: *kind = SDRT_CHECKPOINT_SHARDED_FOLDER; break;
    }
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_checkpoint_num_tensors(sdrt_checkpoint_t checkpoint, int64_t* count) {
  return Guard("sdrt_checkpoint_num_tensors", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::CheckpointObject * ckpt, c_api::Resolve(checkpoint, "checkpoint"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(count, "count"));
    *count = static_cast<int64_t>(ckpt->infos.size());
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_checkpoint_tensor_info(sdrt_checkpoint_t checkpoint, int64_t i,
                                          sdrt_tensor_info_t* info) {
  return Guard("sdrt_checkpoint_tensor_info", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::CheckpointObject * ckpt, c_api::Resolve(checkpoint, "checkpoint"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(info, "info"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(info, "info"));
    const int64_t n = static_cast<int64_t>(ckpt->infos.size());
    if (i < 0 || i >= n) {
      return absl::OutOfRangeError(absl::StrCat("tensor ", i, " of ", n));
    }
    const c_api::CheckpointObject::Info& t = ckpt->infos[static_cast<size_t>(i)];
    info->name = t.name.c_str();
    info->dtype = t.dtype;
    info->dtype_name = t.dtype_name.c_str();
    info->ndim = static_cast<int32_t>(t.shape.size());
    info->shape = t.shape.empty() ? nullptr : t.shape.data();
    info->nbytes = t.nbytes;
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_checkpoint_close(sdrt_checkpoint_t checkpoint) {
  return Guard("sdrt_checkpoint_close",
               [&] { return c_api::DestroyHandle(checkpoint, "checkpoint"); });
}

}  // extern "C"
