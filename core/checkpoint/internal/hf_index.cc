#include "sdrt/core/checkpoint/internal/hf_index.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/internal/strict_json.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// A JSON value for a message: compact, cut after 80 bytes.
std::string Shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 80) + "...";
  return text;
}

absl::Status ParseMetadata(const Json& metadata, const std::string& path, HfIndex& index) {
  if (metadata.is_null()) return absl::OkStatus();
  if (!metadata.is_object()) {
    return Bad(path, absl::StrCat("\"metadata\" must be an object, got ", Shown(metadata)));
  }
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    const Json& value = it.value();
    index.metadata[it.key()] = value.is_string()
                                   ? value.get<std::string>()
                                   : value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  const auto total = metadata.find("total_size");
  if (total == metadata.end()) return absl::OkStatus();
  // Unsigned values above INT64_MAX are refused with negative ones.
  if (!total->is_number_integer() ||
      (total->is_number_unsigned() && total->get<uint64_t>() > INT64_MAX) ||
      (!total->is_number_unsigned() && total->get<int64_t>() < 0)) {
    return Bad(path, absl::StrCat("metadata.total_size must be an integer in [0, 2^63 - 1] "
                                  "(bytes), got ",
                                  Shown(*total)));
  }
  index.total_size = total->is_number_unsigned() ? static_cast<int64_t>(total->get<uint64_t>())
                                                 : total->get<int64_t>();
  return absl::OkStatus();
}

}  // namespace

std::string HfShardFileName(int64_t i, int64_t n) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05lld-of-%05lld.safetensors",
                static_cast<long long>(i + 1), static_cast<long long>(n));
  return name;
}

std::string SerializeHfIndex(const std::vector<std::pair<std::string, std::string>>& weight_map,
                             int64_t total_size) {
  Json map = Json::object();
  for (const auto& [tensor, file] : weight_map) AppendNewMember(map, tensor, file);
  const Json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", std::move(map)}};
  return index.dump(2, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == absl::string_view::npos && name.find('\0') == absl::string_view::npos;
}

absl::StatusOr<HfIndex> ParseHfIndex(absl::string_view text, const std::string& path) {
  absl::StatusOr<Json> parsed = ParseStrictJson(text);
  if (!parsed.ok()) return Bad(path, parsed.status().message());
  const Json& doc = *parsed;
  if (!doc.is_object()) return Bad(path, "the top level must be an object");
  HfIndex index;
  if (const auto metadata = doc.find("metadata"); metadata != doc.end()) {
    if (absl::Status s = ParseMetadata(*metadata, path, index); !s.ok()) return s;
  }
  const auto map = doc.find("weight_map");
  if (map == doc.end()) return Bad(path, "missing field \"weight_map\"");
  if (!map->is_object()) {
    return Bad(path, absl::StrCat("\"weight_map\" must be an object, got ", Shown(*map)));
  }
  if (map->empty()) return Bad(path, "\"weight_map\" names no tensor");
  std::set<std::string> files;
  for (auto it = map->begin(); it != map->end(); ++it) {
    const std::string& tensor = it.key();
    if (tensor.empty() || tensor == kSafetensorsMetadataKey) {
      return Bad(path, absl::StrCat("weight_map: invalid tensor name \"", tensor, "\""));
    }
    if (!it.value().is_string()) {
      return Bad(path, absl::StrCat("weight_map: tensor \"", tensor,
                                    "\": the file must be a string, got ", Shown(it.value())));
    }
    const std::string file = it.value().get<std::string>();
    if (!IsPlainFileName(file)) {
      return Bad(path, absl::StrCat("weight_map: tensor \"", tensor, "\": file \"", file,
                                    "\" is not a file name directly inside the folder (it must "
                                    "be non-empty, at most 255 bytes, without '/', not . or ..)"));
    }
    if (!absl::EndsWith(file, ".safetensors")) {
      return Bad(path, absl::StrCat("weight_map: tensor \"", tensor, "\": file \"", file,
                                    "\" does not end with .safetensors"));
    }
    if (files.insert(file).second && static_cast<int64_t>(files.size()) > kMaxHfIndexFiles) {
      return Bad(path, absl::StrCat("weight_map names more than ", kMaxHfIndexFiles, " files"));
    }
    index.weight_map.emplace_back(tensor, file);
  }
  index.files.assign(files.begin(), files.end());
  return index;
}

}  // namespace sdrt::internal
