// libFuzzer target: model.safetensors.index.json of a Hugging Face checkpoint folder
// (core/checkpoint/internal/hf_index.h, ParseHfIndex). An index that parses keeps its
// promises (file names plain and sorted, tensor names unique, total_size non-negative), and
// its weight_map and total_size written back as JSON (with a total_size, by SerializeHfIndex,
// the writer's serialiser) parse to the same index.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/internal/hf_index.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sdrt::internal::HfIndex> index =
      sdrt::internal::ParseHfIndex(text, "hf/model.safetensors.index.json");
  if (!index.ok()) return 0;
  SDRT_FUZZ_CHECK(!index->weight_map.empty());
  SDRT_FUZZ_CHECK(!index->files.empty());
  SDRT_FUZZ_CHECK(static_cast<int64_t>(index->files.size()) <= sdrt::internal::kMaxHfIndexFiles);
  for (size_t i = 1; i < index->files.size(); ++i) {
    SDRT_FUZZ_CHECK(index->files[i - 1] < index->files[i]);
  }
  const std::set<std::string> files(index->files.begin(), index->files.end());
  std::set<std::string> tensors;
  for (const auto& [tensor, file] : index->weight_map) {
    SDRT_FUZZ_CHECK(!tensor.empty() && tensor != "__metadata__");
    SDRT_FUZZ_CHECK(tensors.insert(tensor).second);
    SDRT_FUZZ_CHECK(sdrt::internal::IsPlainFileName(file));
    SDRT_FUZZ_CHECK(absl::EndsWith(file, ".safetensors"));
    SDRT_FUZZ_CHECK(files.count(file) == 1);
  }
  SDRT_FUZZ_CHECK(!index->total_size.has_value() || *index->total_size >= 0);
  SDRT_FUZZ_CHECK(index->total_size.has_value() == (index->metadata.count("total_size") == 1));

  // With a total_size, written back as WriteHfCheckpoint writes an index (SerializeHfIndex).
  std::string written;
  if (index->total_size.has_value()) {
    written = sdrt::internal::SerializeHfIndex(index->weight_map, *index->total_size);
  } else {
    nlohmann::ordered_json out;
    out["weight_map"] = nlohmann::ordered_json::object();
    for (const auto& [tensor, file] : index->weight_map) out["weight_map"][tensor] = file;
    written = out.dump();
  }
  absl::StatusOr<sdrt::internal::HfIndex> again =
      sdrt::internal::ParseHfIndex(written, "hf/model.safetensors.index.json");
  SDRT_FUZZ_CHECK(again.ok());
  SDRT_FUZZ_CHECK(again->weight_map == index->weight_map);
  SDRT_FUZZ_CHECK(again->files == index->files);
  SDRT_FUZZ_CHECK(again->total_size == index->total_size);
  return 0;
}
