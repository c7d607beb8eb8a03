// `sdrt inspect FILE [--json]`: what a safetensors checkpoint holds.
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_join.h"
#include "core/safetensors.h"
#include "nlohmann/json.hpp"
#include "tools/sdrt/commands.h"
#include "tools/sdrt/output.h"

namespace sdrt::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

int RunInspect(const InspectArgs& args) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(args.path);
  if (!file.ok()) {
    std::cerr << "sdrt inspect: " << file.status().message() << "\n";
    return kExitBadInput;
  }
  int64_t parameters = 0;
  int64_t bytes = 0;
  for (const SafetensorsEntry& e : file->entries()) {
    int64_t numel = 1;
    for (int64_t s : e.shape) numel *= s;
    parameters += numel;
    bytes += e.data_end - e.data_begin;
  }
  if (args.json) {
    nlohmann::ordered_json out;
    out["file"] = args.path;
    out["file_size"] = file->file_size();
    out["tensors"] = file->entries().size();
    out["parameters"] = parameters;
    out["bytes"] = bytes;
    out["metadata"] = file->metadata();
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const SafetensorsEntry& e : file->entries()) {
      entries.push_back({{"name", e.name},
                         {"dtype", std::string(SafetensorsCode(e.dtype))},
                         {"shape", std::vector<int64_t>(e.shape.begin(), e.shape.end())},
                         {"nbytes", e.data_end - e.data_begin},
                         {"data_offsets", {e.data_begin, e.data_end}}});
    }
    out["entries"] = std::move(entries);
    // Invalid UTF-8 (in a path, say) is replaced rather than thrown on.
    std::cout << out.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  Table table({"name", "dtype", "shape", "bytes"}, {false, false, false, true});
  for (const SafetensorsEntry& e : file->entries()) {
    table.AddRow({Printable(e.name), std::string(DTypeName(e.dtype)),
                  "[" + absl::StrJoin(e.shape, ", ") + "]",
                  WithThousands(e.data_end - e.data_begin)});
  }
  std::cout << args.path << "\n\n";
  table.Print(std::cout);
  std::cout << "\n"
            << file->entries().size() << (file->entries().size() == 1 ? " tensor, " : " tensors, ")
            << WithThousands(parameters) << " parameters, " << WithThousands(bytes) << " bytes ("
            << HumanBytes(bytes) << ") of data in a " << HumanBytes(file->file_size()) << " file\n";
  if (file->metadata().empty()) {
    std::cout << "metadata: none\n";
  } else {
    std::cout << "metadata:\n";
    for (const auto& [key, value] : file->metadata()) {
      // Long values (padding, embedded JSON) are cut so the table stays readable;
      // --json prints them whole.
      constexpr size_t kMaxShown = 120;
      std::cout << "  " << Printable(key) << " = " << Printable(Utf8Prefix(value, kMaxShown))
                << (value.size() > kMaxShown
                        ? "... (" + WithThousands(static_cast<int64_t>(value.size())) + " bytes)"
                        : "")
                << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void AddInspectCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "List the tensors of a safetensors file: name, dtype, shape, bytes, totals.");
  cmd->add_option("FILE", args->path, "safetensors file")->required();
  cmd->add_flag("--json", args->json, "print machine-readable JSON instead of a table");
  cmd->callback([args, exit_code] { *exit_code = RunInspect(*args); });
}

}  // namespace sdrt::cli
