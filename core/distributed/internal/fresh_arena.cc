#include "sdrt/core/distributed/internal/fresh_arena.h"

#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tensor/storage.h"

namespace sdrt::internal {
namespace {

constexpr int64_t kMaxAlignment = 16;

// The smallest multiple of both kFreshAlignment and `alignment` at or after `at`, or -1
// when it would overflow.
int64_t NextStart(int64_t at, int64_t alignment) {
  constexpr int64_t kMax =
      std::numeric_limits<int64_t>::max() - 2 * kFreshAlignment * kMaxAlignment;
  if (at > kMax) return -1;
  at = (at + kFreshAlignment - 1) / kFreshAlignment * kFreshAlignment;
  while (at % alignment != 0) at += kFreshAlignment;  // at most `alignment` steps
  return at;
}

}  // namespace

absl::StatusOr<FreshLayout> LayOutFresh(absl::Span<const FreshPiece> pieces) {
  FreshLayout layout;
  layout.offsets.reserve(pieces.size());
  int64_t cursor = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const FreshPiece& p = pieces[i];
    if (p.bytes < 0 || p.alignment < 1 || p.alignment > kMaxAlignment ||
        (p.file >= 0 && p.end - p.begin != p.bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fresh piece ", i, ": ", p.bytes, " bytes, alignment ", p.alignment,
                       ", file ", p.file, " range [", p.begin, ", ", p.end, ")"));
    }
    const bool follows = i > 0 && p.file >= 0 && pieces[i - 1].file == p.file &&
                         pieces[i - 1].end == p.begin && cursor % p.alignment == 0;
    const int64_t at = follows ? cursor : NextStart(cursor, p.alignment);
    if (at < 0 || at > std::numeric_limits<int64_t>::max() - p.bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the new local tensors need more than ", cursor, " bytes"));
    }
    layout.offsets.push_back(at);
    cursor = at + p.bytes;
  }
  layout.bytes = cursor;
  return layout;
}

absl::Status AllocateFresh(const FreshLayout& layout, Device device,
                           absl::Span<Tensor* const> dests) {
  if (dests.size() != layout.offsets.size()) {
    return absl::InternalError(absl::StrCat("AllocateFresh: ", dests.size(), " tensors for ",
                                            layout.offsets.size(), " offsets"));
  }
  if (dests.empty()) return absl::OkStatus();
  std::shared_ptr<Storage> arena;
  if (device.is_cpu()) {
    SDRT_ASSIGN_OR_RETURN(arena, Storage::AllocateCpu(layout.bytes));
  } else {
    SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(device.type));
    SDRT_ASSIGN_OR_RETURN(arena, backend->Allocate(layout.bytes, device));
  }
  for (size_t i = 0; i < dests.size(); ++i) {
    Tensor& dest = *dests[i];
    SDRT_ASSIGN_OR_RETURN(
        dest, Tensor::AtByteOffset(arena, layout.offsets[i], dest.dtype(), dest.shape()));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
