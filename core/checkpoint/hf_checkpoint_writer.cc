// Writing Hugging Face checkpoint folders (hf_checkpoint_writer.h): the size parser, the
// split, the check that an existing folder is one this writer could have made, and the
// writer, which refuses everything it can before it creates the temporary folder.
#include "sdrt/core/checkpoint/hf_checkpoint_writer.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/internal/hf_index.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();

// The bytes per unit of a lower-case unit name; 0 for an unknown one.
int64_t UnitBytes(absl::string_view unit) {
  struct Unit {
    absl::string_view name;
    int64_t bytes;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"b", 1},
                                    {"kb", 1'000},
                                    {"mb", 1'000'000},
                                    {"gb", 1'000'000'000},
                                    {"tb", 1'000'000'000'000},
                                    {"kib", int64_t{1} << 10},
                                    {"mib", int64_t{1} << 20},
                                    {"gib", int64_t{1} << 30},
                                    {"tib", int64_t{1} << 40}};
  for (const Unit& u : kUnits) {
    if (u.name == unit) return u.bytes;
  }
  return 0;
}

// The entries of the folder `dir` but "." and "..", sorted; errno's status when it
// cannot be listed.
absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), &closedir);
  if (d == nullptr) return internal::IoError(errno, "opendir", dir);
  std::vector<std::string> names;
  while (const dirent* e = readdir(d.get())) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// OK when the non-empty folder `target`, whose entries are `names`, is exactly a folder
// WriteHfCheckpoint could have written; AlreadyExists saying why not otherwise.
absl::Status CheckIsOurs(const std::string& target, const std::vector<std::string>& names) {
  const auto refuse = [&](absl::string_view why) {
    return absl::AlreadyExistsError(absl::StrCat(
        target, ": exists and is not a Hugging Face checkpoint folder sdrt could have written (",
        why, "); refusing to replace it"));
  };
  for (const std::string& name : names) {
    struct stat st;
    const std::string path = absl::StrCat(target, "/", name);
    if (lstat(path.c_str(), &st) != 0) return internal::IoError(errno, "lstat", path);
    if (!S_ISREG(st.st_mode)) {
      return refuse(absl::StrCat("it holds \"", absl::CHexEscape(name), "\", not a regular file"));
    }
  }
  if (names.size() == 1 && names[0] == kHfSingleFileName) {
    const absl::StatusOr<SafetensorsFile> file =
        SafetensorsFile::Open(absl::StrCat(target, "/", kHfSingleFileName));
    return file.ok() ? absl::OkStatus() : refuse(file.status().message());
  }
  if (!std::binary_search(names.begin(), names.end(), std::string(kHfIndexFileName))) {
    const auto other = std::find_if(names.begin(), names.end(), [](const std::string& name) {
      return name != kHfSingleFileName;
    });
    return refuse(
        absl::StrCat("it holds \"", absl::CHexEscape(*other), "\" and no ", kHfIndexFileName));
  }
  const absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(target);
  if (!source.ok()) return refuse(source.status().message());
  const int64_t n = static_cast<int64_t>(source->files().size());
  for (int64_t i = 0; i < n; ++i) {
    const std::string& name = source->files()[static_cast<size_t>(i)].name;
    if (name != internal::HfShardFileName(i, n)) {
      return refuse(absl::StrCat("its index names \"", absl::CHexEscape(name), "\", not ",
                                 internal::HfShardFileName(i, n)));
    }
  }
  if (static_cast<int64_t>(names.size()) != n + 1) {
    for (const std::string& name : names) {
      const bool named = name == kHfIndexFileName ||
                         std::any_of(source->files().begin(), source->files().end(),
                                     [&](const CheckpointSourceFile& f) { return f.name == name; });
      if (!named) {
        return refuse(absl::StrCat("it holds \"", absl::CHexEscape(name), "\", which ",
                                   kHfIndexFileName, " does not name"));
      }
    }
  }
  return absl::OkStatus();
}

// CheckHfCheckpointTarget for `target` (no trailing slash): whether there is a non-empty
// folder to replace (true) or nothing or an empty folder (false).
absl::StatusOr<bool> ReplacesFolder(const std::string& target, bool overwrite) {
  struct stat st;
  if (lstat(target.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return internal::IoError(errno, "lstat", target);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::AlreadyExistsError(
        absl::StrCat(target, ": exists and is not a folder; refusing to replace it"));
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListFolder(target));
  if (names.empty()) return false;
  SDRT_RETURN_IF_ERROR(CheckIsOurs(target, names));
  if (!overwrite) {
    return absl::AlreadyExistsError(absl::StrCat(
        target,
        ": a Hugging Face checkpoint folder is already there; replace it with overwrite "
        "(--overwrite in the sdrt commands)"));
  }
  return true;
}

}  // namespace

absl::StatusOr<int64_t> ParseMaxShardSize(absl::string_view text) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard size \"", absl::CHexEscape(text), "\": ", why,
        " (a number of bytes, or a number and a unit: KB, MB, GB, TB or KiB, MiB, GiB, TiB)"));
  };
  size_t pos = 0;
  const auto digits = [&](std::string* out) {
    while (pos < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[pos]))) {
      out->push_back(s[pos++]);
    }
  };
  std::string whole, fraction;
  digits(&whole);
  const bool has_point = pos < s.size() && s[pos] == '.';
  if (has_point) {
    ++pos;
    digits(&fraction);
  }
  if (whole.empty() && fraction.empty()) return bad("no number");
  if (fraction.size() > 18) return bad("more than 18 digits after the point");
  const std::string unit = absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(s.substr(pos)));
  const int64_t per_unit = UnitBytes(unit);
  if (per_unit == 0) return bad(absl::StrCat("unknown unit \"", absl::CHexEscape(unit), "\""));
  if (has_point && per_unit == 1) return bad("a number of bytes must be whole");
  // Exact decimal arithmetic, truncated to whole bytes.
  __int128 bytes = 0;
  for (char c : whole) {
    bytes = bytes * 10 + (c - '0');
    if (bytes * per_unit > kMaxBytes) return bad("more than 2^63 - 1 bytes");
  }
  bytes *= per_unit;
  __int128 numerator = 0;
  __int128 denominator = 1;
  for (char c : fraction) {
    numerator = numerator * 10 + (c - '0');
    denominator *= 10;
  }
  bytes += numerator * per_unit / denominator;
  if (bytes > kMaxBytes) return bad("more than 2^63 - 1 bytes");
  if (bytes == 0) return bad("the limit must be at least 1 byte");
  return static_cast<int64_t>(bytes);
}

absl::StatusOr<HfShardPlan> PlanHfShards(absl::Span<const int64_t> nbytes,
                                         int64_t max_shard_bytes) {
  if (max_shard_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PlanHfShards: the limit must be at least 1 byte, got ", max_shard_bytes));
  }
  HfShardPlan plan;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  for (size_t i = 0; i < nbytes.size(); ++i) {
    const int64_t n = nbytes[i];
    if (n < 0 || n > kMaxBytes - plan.total_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PlanHfShards: tensor ", i, " has ", n, " bytes (negative, or the sum passes 2^63 - 1)"));
    }
    plan.total_size += n;
    if (n > max_shard_bytes) {  // alone, at once; the current file keeps filling
      plan.file_tensors.push_back({i});
      continue;
    }
    if (n > max_shard_bytes - current_bytes) {
      plan.file_tensors.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += n;
  }
  if (!current.empty() || plan.file_tensors.empty())
    plan.file_tensors.push_back(std::move(current));
  const int64_t files = static_cast<int64_t>(plan.file_tensors.size());
  if (files > internal::kMaxHfIndexFiles) {
    return absl::InvalidArgumentError(
        absl::StrCat("PlanHfShards: ", files, " files, more than the ", internal::kMaxHfIndexFiles,
                     " an index may name (raise the limit)"));
  }
  for (int64_t f = 0; f < files; ++f) {
    plan.files.push_back(files == 1 ? std::string(kHfSingleFileName)
                                    : internal::HfShardFileName(f, files));
  }
  return plan;
}

absl::Status CheckHfCheckpointTarget(const std::string& out_dir, bool overwrite) {
  return ReplacesFolder(StripTrailingSlashes(out_dir), overwrite).status();
}

absl::StatusOr<HfShardPlan> WriteHfCheckpoint(const std::string& out_dir,
                                              absl::Span<const SafetensorsTensorSpec> specs,
                                              const SafetensorsTensorSource& source,
                                              const std::map<std::string, std::string>& metadata,
                                              const WriteHfCheckpointOptions& options) {
  const std::string target = StripTrailingSlashes(out_dir);
  const auto [parent, base] = internal::SplitPath(target);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteHfCheckpoint: \"", out_dir, "\" does not name a folder to create"));
  }
  SDRT_ASSIGN_OR_RETURN(const bool replace_existing, ReplacesFolder(target, options.overwrite));
  std::set<absl::string_view> names;
  std::vector<int64_t> nbytes;
  for (const SafetensorsTensorSpec& spec : specs) {
    if (spec.name.empty() || !names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteHfCheckpoint: tensor \"", absl::CHexEscape(spec.name),
                       "\": ", spec.name.empty() ? "an empty name" : "named twice"));
    }
    const absl::StatusOr<int64_t> numel = CheckedNumel(spec.shape);
    const absl::StatusOr<int64_t> bytes =
        numel.ok() ? BytesForElements(spec.dtype, *numel) : numel.status();
    if (!bytes.ok() || *bytes > kMaxBytes) {
      return absl::InvalidArgumentError(absl::StrCat("WriteHfCheckpoint: tensor \"",
                                                     absl::CHexEscape(spec.name), "\": shape ",
                                                     ShapeToString(spec.shape), " is not a size"));
    }
    nbytes.push_back(*bytes);
  }
  SDRT_ASSIGN_OR_RETURN(HfShardPlan plan, PlanHfShards(nbytes, options.max_shard_bytes));

  // The index must be what the reader accepts, naming every tensor as given (a name the
  // parser refuses or JSON cannot carry is refused here, before anything is written).
  std::string index_text;
  if (plan.sharded()) {
    std::vector<std::pair<std::string, std::string>> weight_map;
    for (size_t f = 0; f < plan.files.size(); ++f) {
      for (size_t i : plan.file_tensors[f]) weight_map.emplace_back(specs[i].name, plan.files[f]);
    }
    index_text = internal::SerializeHfIndex(weight_map, plan.total_size);
    const absl::StatusOr<internal::HfIndex> parsed =
        internal::ParseHfIndex(index_text, std::string(kHfIndexFileName));
    if (!parsed.ok() || parsed->weight_map != weight_map ||
        static_cast<int64_t>(index_text.size()) > internal::kMaxJsonFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteHfCheckpoint: ", target,
                       ": the tensors cannot be named in an index a reader ", "accepts (",
                       parsed.ok() ? "a name is not valid UTF-8, or the index is too large"
                                   : parsed.status().message(),
                       ")"));
    }
  }
  // Hugging Face loaders refuse a file whose __metadata__ lacks "format".
  std::map<std::string, std::string> file_metadata = metadata;
  file_metadata.emplace("format", "pt");

  SDRT_ASSIGN_OR_RETURN(internal::AtomicFolder tmp, internal::AtomicFolder::Create(parent, base));
  WriteSafetensorsOptions write_options;
  write_options.data_in_given_order = true;  // the given order, file by file
  write_options.follow_symlinks = false;
  for (size_t f = 0; f < plan.files.size(); ++f) {
    const std::vector<size_t>& members = plan.file_tensors[f];
    std::vector<SafetensorsTensorSpec> file_specs;
    for (size_t i : members) file_specs.push_back(specs[i]);
    const auto file_source = [&](size_t k) { return source(members[k]); };
    SDRT_RETURN_IF_ERROR(WriteSafetensorsStreamed(absl::StrCat(tmp.path(), "/", plan.files[f]),
                                                  file_specs, file_source, file_metadata,
                                                  write_options));
  }
  if (plan.sharded()) {
    SDRT_RETURN_IF_ERROR(
        internal::WriteNewFile(absl::StrCat(tmp.path(), "/", kHfIndexFileName), index_text));
  }
  SDRT_RETURN_IF_ERROR(tmp.Install(parent, target, replace_existing));
  return plan;
}

}  // namespace sdrt
