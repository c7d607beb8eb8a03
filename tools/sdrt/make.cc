// `sdrt make --arch ARCH [--dtype bf16|f16|f32] [--scale S] [--seed N] OUT.safetensors`:
// a deterministic synthetic checkpoint with a real architecture's names and shapes.
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tools/sdrt/commands.h"
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
  bool json = false;
};

int RunMake(MakeArgs args) {
  // CLI11 wraps "-1" into a uint64_t silently, so the seed is read as text and refused unless
  // it is a plain non-negative decimal that fits in 64 bits.
  if (args.seed_text.empty() || args.seed_text[0] == '-' || args.seed_text[0] == '+' ||
      !absl::SimpleAtoi(args.seed_text, &args.seed)) {
    std::cerr << "sdrt make: --seed must be an integer in [0, 18446744073709551615], got \""
              << args.seed_text << "\"\n";
    return kExitBadInput;
  }
  DType dtype = DType::kBFloat16;
  if (args.dtype == "f32") {
    dtype = DType::kFloat32;
  } else if (args.dtype == "f16") {
    dtype = DType::kFloat16;
  } else if (args.dtype != "bf16") {
    std::cerr << "sdrt make: --dtype must be bf16, f16 or f32, got \"" << args.dtype << "\"\n";
    return kExitBadInput;
  }
  absl::Status out_ok = CheckOutputPath(args.out, {});
  if (out_ok.ok()) out_ok = CheckReplaceableSafetensors(args.out);
  if (!out_ok.ok()) {
    std::cerr << "sdrt make: " << out_ok.message() << "\n";
    return ExitCodeFor(out_ok);
  }
  absl::StatusOr<ArchConfig> config = ScaledArch(args.arch, args.scale);
  if (!config.ok()) {
    std::cerr << "sdrt make: " << config.status().message() << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> tensors =
      MakeSyntheticStateDict(*config, dtype, args.seed);
  if (!tensors.ok()) {
    std::cerr << "sdrt make: " << tensors.status().message() << "\n";
    return ExitCodeFor(tensors.status());
  }
  WriteSafetensorsOptions write_options;
  write_options.follow_symlinks = false;  // a link made since the check is replaced, not followed
  const absl::Status written = WriteSafetensors(
      args.out, *tensors, SyntheticMetadata(*config, args.scale, args.seed), write_options);
  if (!written.ok()) {
    std::cerr << "sdrt make: " << written.message() << "\n";
    return ExitCodeFor(written);
  }
  int64_t parameters = 0;
  int64_t bytes = 0;
  for (const auto& [name, t] : *tensors) {
    parameters += t.numel();
    bytes += t.nbytes();
  }
  const ArchConfig& c = *config;
  if (args.json) {
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
                                  {"vocab", c.vocab},
                                  {"tensors", tensors->size()},
                                  {"parameters", parameters},
                                  {"bytes", bytes}};
    std::cout << out.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::cout << "wrote " << args.out << ": " << c.name << " (scale " << args.scale << ", seed "
            << args.seed << ", " << DTypeName(dtype) << "): hidden " << c.hidden
            << ", intermediate " << c.intermediate << ", " << c.layers
            << (c.layers == 1 ? " layer, " : " layers, ") << c.heads << " heads";
  if (c.kv_heads != c.heads) std::cout << " / " << c.kv_heads << " kv heads";
  std::cout << ", vocab " << c.vocab << "\n"
            << tensors->size() << " tensors, " << WithThousands(parameters) << " parameters, "
            << WithThousands(bytes) << " bytes (" << HumanBytes(bytes) << ")\n";
  return kExitOk;
}

}  // namespace

void AddMakeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MakeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make",
      "Write a deterministic synthetic checkpoint with a real architecture's tensor names and "
      "shapes (seeded noise, not a trained model).");
  cmd->add_option("OUT", args->out, "the safetensors file to write (replaced atomically)")
      ->required();
  std::string archs;
  for (const std::string& a : ArchNames()) archs += (archs.empty() ? "" : ", ") + a;
  cmd->add_option("--arch", args->arch, "architecture: " + archs)->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "element type: bf16, f16 or f32")->capture_default_str();
  cmd->add_option("--scale", args->scale,
                  "multiplies head_dim, intermediate, vocab and layers (each at least 1; head "
                  "counts kept), in (0, 16]")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed_text, "seed of the values")->capture_default_str();
  cmd->add_flag("--json", args->json, "print machine-readable JSON instead of text");
  cmd->callback([args, exit_code] { *exit_code = RunMake(*args); });
}

}  // namespace sdrt::cli
