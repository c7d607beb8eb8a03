// libFuzzer target: index.json of a sharded checkpoint (core/checkpoint/internal/index_json.h,
// ParseIndex). An index that parses must serialise and parse back to the same index, whose
// hash (IndexXxh64, what rank files record) is the same: only the meaning counts.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "sdrt/core/checkpoint/internal/index_json.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

namespace {

bool SameTensor(const sdrt::ShardedCheckpointTensor& a, const sdrt::ShardedCheckpointTensor& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
         a.placements == b.placements && a.xxh64 == b.xxh64;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sdrt::ShardedCheckpointIndex> index =
      sdrt::internal::ParseIndex(text, "ckpt/index.json", "ckpt");
  if (!index.ok()) return 0;
  SDRT_FUZZ_CHECK(index->mesh != nullptr);
  SDRT_FUZZ_CHECK(index->mesh->num_ranks() == index->world_size);
  SDRT_FUZZ_CHECK(static_cast<int64_t>(index->files.size()) == index->world_size);
  for (const sdrt::ShardedCheckpointTensor& tensor : index->tensors) {
    SDRT_FUZZ_CHECK(static_cast<int>(tensor.placements.size()) == index->mesh->ndim());
    SDRT_FUZZ_CHECK(index->Find(tensor.name) != nullptr);
  }

  absl::StatusOr<std::string> again_text = sdrt::internal::SerializeIndex(*index);
  SDRT_FUZZ_CHECK(again_text.ok());
  absl::StatusOr<sdrt::ShardedCheckpointIndex> again =
      sdrt::internal::ParseIndex(*again_text, "ckpt/index.json", "ckpt");
  SDRT_FUZZ_CHECK(again.ok());
  SDRT_FUZZ_CHECK(again->world_size == index->world_size);
  SDRT_FUZZ_CHECK(*again->mesh == *index->mesh);
  SDRT_FUZZ_CHECK(again->plan == index->plan);
  SDRT_FUZZ_CHECK(again->files == index->files);
  SDRT_FUZZ_CHECK(again->metadata == index->metadata);
  SDRT_FUZZ_CHECK(again->tensors.size() == index->tensors.size());
  for (size_t i = 0; i < index->tensors.size(); ++i) {
    SDRT_FUZZ_CHECK(SameTensor(again->tensors[i], index->tensors[i]));
  }
  SDRT_FUZZ_CHECK(again->format_version == index->format_version);
  absl::StatusOr<uint64_t> hash = sdrt::internal::IndexXxh64(*index);
  SDRT_FUZZ_CHECK(hash.ok());
  SDRT_FUZZ_CHECK(*hash == *sdrt::internal::IndexXxh64(*again));
  return 0;
}
