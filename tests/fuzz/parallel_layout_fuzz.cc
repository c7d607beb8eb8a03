// libFuzzer target: parallel layout descriptions (ParallelLayout::Parse,
// core/checkpoint/parallel_layout.h) for a world size taken from the first input byte, then
// Place on fixed tensor names and on names taken from the input. Every home returned has
// a mesh inside the world and one placement per mesh dim, none Partial, sharding only dims
// the tensor has; a rank's MetaStateDict holds only tensors whose mesh holds it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t world = data[0] % 17;  // 0: not known
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t newline = text.find('\n');
  absl::StatusOr<sdrt::ParallelLayout> layout =
      sdrt::ParallelLayout::Parse(text.substr(0, newline), world);
  if (!layout.ok()) return 0;
  SDRT_FUZZ_CHECK(world == 0 || layout->world_size() == world);
  if (layout->world_size() > 64) return 0;  // keep each input fast

  std::vector<sdrt::SafetensorsTensorSpec> tensors = {
      {"model.embed_tokens.weight", sdrt::DType::kBFloat16, {16, 4}},
      {"model.layers.0.self_attn.q_proj.weight", sdrt::DType::kBFloat16, {8, 4}},
      {"model.layers.1.mlp.experts.0.down_proj.weight", sdrt::DType::kBFloat16, {4, 8}},
      {"model.layers.1.mlp.experts.1.down_proj.weight", sdrt::DType::kBFloat16, {4, 8}},
      {"model.layers.1.mlp.experts.w13", sdrt::DType::kFloat32, {4, 8, 4}},
      {"model.norm.weight", sdrt::DType::kFloat32, {4}},
      {"scalar", sdrt::DType::kFloat32, {}}};
  if (newline != absl::string_view::npos) {  // the rest of the input: one name per line
    absl::string_view rest = text.substr(newline + 1);
    while (!rest.empty() && tensors.size() < 32) {
      const size_t end = rest.find('\n');
      tensors.push_back({std::string(rest.substr(0, end)), sdrt::DType::kFloat32, {8, 8}});
      rest = end == absl::string_view::npos ? absl::string_view() : rest.substr(end + 1);
    }
  }
  absl::StatusOr<std::vector<sdrt::LaidOutTensor>> placed = layout->Place(tensors);
  if (!placed.ok()) return 0;
  SDRT_FUZZ_CHECK(placed->size() == tensors.size());
  for (size_t i = 0; i < placed->size(); ++i) {
    const sdrt::LaidOutTensor& home = (*placed)[i];
    SDRT_FUZZ_CHECK(home.mesh != nullptr);
    SDRT_FUZZ_CHECK(static_cast<int>(home.placements.size()) == home.mesh->ndim());
    for (int64_t rank : home.mesh->ranks()) {
      SDRT_FUZZ_CHECK(rank >= 0 && rank < layout->world_size());
    }
    for (const sdrt::Placement& p : home.placements) {
      SDRT_FUZZ_CHECK(!p.is_partial());
      if (p.is_shard_like()) {
        SDRT_FUZZ_CHECK(p.dim() >= 0 && p.dim() < static_cast<int>(tensors[i].shape.size()));
      }
    }
  }
  for (int64_t rank = 0; rank < layout->world_size(); ++rank) {
    absl::StatusOr<sdrt::Map> local = layout->MetaStateDict(tensors, rank);
    if (!local.ok()) continue;  // a name listed twice
    for (size_t i = 0; i < local->size(); ++i) {
      SDRT_FUZZ_CHECK(local->value(i).as_dtensor().mesh()->Coordinate(rank).has_value());
    }
  }
  return 0;
}
