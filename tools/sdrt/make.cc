// `sdrt make --arch ARCH [--dtype bf16|f16|f32] [--scale S] [--seed N] [--header-only]
// OUT.safetensors`: a deterministic synthetic checkpoint with a real architecture's names and
// shapes, streamed to disk one tensor at a time (memory near the largest tensor) after a
// free-space check; with --header-only, only its header (every tensor's dtype, shape and
// data_offsets as if the data followed, and "sdrt.header_only" = "true" in __metadata__),
// which readers refuse to load (SafetensorsFile::Options::accept_header_only).

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/output_path.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt::cli {
namespace {

struct MakeArgs {
  std::string out;
  std::string arch = "tiny-llama";
  std::string dtype = "bf16";
  double scale = 1.0;
  std::string seed_text = "0";  // parsed by RunMake into `seed`
  uint64_t seed = 0;
  bool header_only = false;
  SharedOptions shared;  // --overwrite, --json
};

int RunMake(MakeArgs args) {
  // One process, but under mpiexec the launcher's rank 0 alone prints (ReportError).
  const auto fail = [](const absl::Status& status) {
    return ReportError("make", status, /*rank=*/0);
  };
  // CLI11 wraps "-1" into a uint64_t silently, so the seed is read as text and refused unless
  // it is a plain non-negative decimal that fits in 64 bits.
  if (args.seed_text.empty() || args.seed_text[0] == '-' || args.seed_text[0] == '+' ||
      !absl::SimpleAtoi(args.seed_text, &args.seed)) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--seed must be an integer in [0, 18446744073709551615], got \"", args.seed_text, "\"")));
  }
  const DType dtype = args.dtype == "f32"   ? DType::kFloat32
                      : args.dtype == "f16" ? DType::kFloat16
                                            : DType::kBFloat16;  // checked by CLI11
  absl::Status out_ok = CheckOutputPath(args.out, {});
  if (out_ok.ok() && absl::EndsWith(args.out, "/")) {  // a folder's name: make writes a file
    out_ok = absl::InvalidArgumentError(
        absl::StrCat("\"", args.out, "\" ends in '/': sdrt make writes one file, OUT.safetensors"));
  }
  if (out_ok.ok()) out_ok = CheckReplaceableSafetensors(args.out, args.shared.overwrite);
  if (!out_ok.ok()) return fail(out_ok);
  absl::StatusOr<ArchConfig> config = ScaledArch(args.arch, args.scale);
  if (!config.ok()) return fail(config.status());  // InvalidArgument: exit 2
  absl::StatusOr<SyntheticStateDict> synthetic =
      SyntheticStateDict::Create(*config, dtype, args.seed);
  if (!synthetic.ok()) return fail(synthetic.status());
  const std::map<std::string, std::string> metadata =
      SyntheticMetadata(*config, args.scale, args.seed);
  WriteSafetensorsOptions write_options;
  write_options.follow_symlinks = false;  // a link made since the check is replaced
  write_options.header_only = args.header_only;
  write_options.replace_existing = args.shared.overwrite;  // OUT written meanwhile: kept
  // Refused before anything is written when the file cannot fit: the temporary file beside
  // OUT takes the whole size (an existing OUT is replaced only at the end).
  absl::Status room = CheckFreeSpace(args.out, synthetic->specs(), metadata, write_options);
  if (!room.ok()) return fail(room);
  // Streamed: the header first, then one tensor at a time, so memory peaks near the
  // largest tensor (llama-70b is about 141 GB in bf16); the header alone with --header-only.
  const absl::Status written = WriteSafetensorsStreamed(
      args.out, synthetic->specs(), [&](size_t i) { return synthetic->MakeTensor(i); }, metadata,
      write_options);
  if (!written.ok()) return fail(written);
  absl::StatusOr<int64_t> file_size =
      SafetensorsFileBytes(synthetic->specs(), metadata, write_options);
  if (!file_size.ok()) return fail(file_size.status());
  const int64_t parameters = synthetic->parameters();
  const int64_t bytes = synthetic->bytes();
  const size_t tensor_count = synthetic->specs().size();
  const ArchConfig& c = *config;
  const std::vector<std::pair<std::string, int64_t>> moe = synthetic_internal::MoeSizes(c);
  if (args.shared.json) {
    nlohmann::ordered_json out = {{"file", args.out},
                                  {"arch", c.name},
                                  {"scale", args.scale},
                                  {"seed", args.seed},
                                  {"dtype", std::string(DTypeName(dtype))},
                                  {"hidden", c.hidden},
                                  {"intermediate", c.intermediate},
                                  {"layers", c.layers},
                                  {"heads", c.heads},
                                  {"kv_heads", c.kv_heads},
                                  {"head_dim", c.head_dim},
                                  {"vocab", c.vocab}};
    for (const auto& [key, value] : moe) out[key] = value;
    out["tensors"] = tensor_count;
    out["parameters"] = parameters;
    out["bytes"] = bytes;  // of the tensors' data (not in the file with header_only)
    out["header_only"] = args.header_only;
    out["file_size"] = *file_size;
    std::cout << JsonText(out, 1) << "\n";
    return kExitOk;
  }
  std::cout << "wrote " << Printable(args.out) << ": " << c.name << " (scale " << args.scale
            << ", seed " << args.seed << ", " << DTypeName(dtype) << "): hidden " << c.hidden
            << ", intermediate " << c.intermediate << ", " << c.layers
            << (c.layers == 1 ? " layer, " : " layers, ") << c.heads << " heads";
  if (c.kv_heads != c.heads) std::cout << " / " << c.kv_heads << " kv heads";
  std::cout << ", vocab " << c.vocab;
  if (c.experts > 0) {
    std::cout << "; " << c.dense_layers << " dense + " << c.layers - c.dense_layers
              << " MoE layers of " << c.experts << " experts (width " << c.moe_intermediate
              << (c.shared_experts > 0 ? ", 1 shared)" : ")");
  }
  if (c.q_lora_rank > 0) {
    std::cout << "; MLA q_lora " << c.q_lora_rank << ", kv_lora " << c.kv_lora_rank << ", qk "
              << c.qk_nope_head_dim << " + " << c.qk_rope_head_dim << ", v " << c.v_head_dim;
  }
  std::cout << "\n"
            << Counted(static_cast<int64_t>(tensor_count), "tensor") << ", "
            << Counted(parameters, "parameter") << ", " << Counted(bytes, "byte") << " ("
            << HumanBytes(bytes) << ")\n";
  if (args.header_only) {
    std::cout << "header only: a " << WithThousands(*file_size) << "-byte file ("
              << HumanBytes(*file_size)
              << ") describing them, no tensor bytes (sdrt inspect lists it; loads refuse it)\n";
  }
  return kExitOk;
}

}  // namespace

void AddMakeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MakeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make",
      "Write a deterministic synthetic checkpoint with a real architecture's tensor names and "
      "shapes (seeded noise, not a trained model).");
  cmd->add_option(
         "OUT", args->out,
         "the safetensors file to write (atomically; an existing one only with --overwrite)")
      ->required();
  std::string archs;
  for (const std::string& a : ArchNames()) archs += (archs.empty() ? "" : ", ") + a;
  cmd->add_option("--arch", args->arch, "architecture: " + archs)->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "element type: bf16, f16 or f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--scale", args->scale,
                  "multiplies head_dim, intermediate, vocab and layers (each at least 1; head "
                  "counts kept; for the MoE archs also hidden, the experts and the MLA ranks), "
                  "in (0, 16]")
      ->check(DecimalNumber())  // not CLI11's reading of '' as 0, nor hexadecimal
      ->capture_default_str();
  cmd->add_option("--seed", args->seed_text, "seed of the values")->capture_default_str();
  cmd->add_flag("--header-only", args->header_only,
                "write only the safetensors header (every tensor's dtype, shape and offsets, "
                "no data): a description sdrt inspect lists and loads refuse");
  AddSharedOptions(cmd, kOverwriteOption | kJsonOption, &args->shared);
  cmd->callback([args, exit_code] { *exit_code = RunMake(*args); });
}

}  // namespace sdrt::cli
