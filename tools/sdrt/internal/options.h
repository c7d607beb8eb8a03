// The options several `sdrt` commands share, each declared once here with its one check
// (docs/CLI.md): a command adds the ones it takes with AddSharedOptions, and a bad value is
// a CLI11 parse error (exit 2, one line; under mpiexec printed once for the multi-rank
// commands, main.cc), before any file is opened or any rank is started.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_OPTIONS_H_
#define SDRT_TOOLS_SDRT_INTERNAL_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"

namespace sdrt::cli {

// --timeout: default 600 s (the library's, Communicator::kDefaultTimeout); at most a week.
inline constexpr double kDefaultTimeoutSeconds = 600;
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;
// --bucket-mib: at most 1 TiB, so that the bytes (MiB << 20) stay far from overflow; at
// least 64 bytes (1/16384 MiB: fractions are allowed), the least LoadStateDict and
// ReshardStateDict take.
inline constexpr int64_t kMaxBucketMib = int64_t{1} << 20;

// Which of the shared options a command takes (AddSharedOptions), or'ed together.
inline constexpr unsigned kTimeoutOption = 1u << 0;       // --timeout SECONDS
inline constexpr unsigned kJsonOption = 1u << 1;          // --json
inline constexpr unsigned kProgressOption = 1u << 2;      // --progress
inline constexpr unsigned kDeviceOption = 1u << 3;        // --device cpu|cuda
inline constexpr unsigned kBucketMibOption = 1u << 4;     // --bucket-mib MIB
inline constexpr unsigned kReadOption = 1u << 5;          // --read auto|all|root, --direct-io
inline constexpr unsigned kMeshPlanOption = 1u << 6;      // --mesh M --plan P (required)
inline constexpr unsigned kMeshDimNamesOption = 1u << 7;  // --mesh-dim-names dp,tp
inline constexpr unsigned kOverwriteOption = 1u << 8;     // --overwrite

// The values of the shared options (the defaults for those a command does not take).
struct SharedOptions {
  double timeout_seconds = kDefaultTimeoutSeconds;
  bool json = false;
  bool progress = false;
  std::string device = "cpu";  // "cpu" or "cuda"
  double bucket_mib = 256;     // in [1/16384, kMaxBucketMib]
  std::string read = "auto";   // "auto", "all" or "root"
  bool direct_io = false;      // never with read "root"
  bool read_once_per_node = false;  // LoadOptions::share_reads; never with read "root"
  int readers = 0;                  // LoadOptions::readers, in [0, 64]; <= 1 with read "root"
  bool map_results = false;  // LoadOptions::map_results; never with read "root", direct_io
                             // or read_once_per_node
  std::string mesh;
  std::string plan;
  std::string mesh_dim_names;
  bool overwrite = false;

  // --bucket-mib in whole bytes (at least 1).
  int64_t bucket_bytes() const;
  // --read as the library's ReadMode.
  ReadMode read_mode() const;
};

// Adds the options of `which` (k*Option) to `cmd`, stored in *options (which must outlive
// the app): --timeout within [0.001, kMaxTimeoutSeconds] and finite, --device and --read
// members of their lists (CLI::IsMember), --bucket-mib within its range, --direct-io
// refused with --read root; --mesh and --plan required.
void AddSharedOptions(CLI::App* cmd, unsigned which, SharedOptions* options);

// The timeout of the session's communicators: --timeout in whole milliseconds (at least 1).
std::chrono::milliseconds TimeoutFrom(double seconds);

// --mesh (and --mesh-dim-names) and --plan, parsed and checked against each other.
struct MeshAndPlan {
  std::shared_ptr<const DeviceMesh> mesh;
  ShardingPlan plan;
};

// InvalidArgument naming --mesh (and --mesh-dim-names) for a mesh that does not parse, or
// for a parallel layout description as --plan (a command writing one mesh for every tensor
// takes none); ShardingPlan::FromSpec's and CheckMesh's errors.
absl::StatusOr<MeshAndPlan> ParseMeshAndPlan(const SharedOptions& options);

// --plan as a parallel layout description (ParallelLayout::IsDescription) with --mesh as the
// world size: one whole number >= 1 in plain digits, or empty when the description gives
// every size.
// InvalidArgument naming --mesh for anything else; ParallelLayout::Parse's errors.
absl::StatusOr<ParallelLayout> ParseParallelLayout(const std::string& mesh_spec,
                                                   const std::string& plan_spec);

// A decimal number as a person writes it ("3", "0.5", "1e-6", "+2."): digits with at most
// one point, then an optional exponent; false for anything else, hexadecimal ("0x10",
// "0x1p4"), "inf" and "nan" included, which strtod would take. The one reader of the
// commands' fractional numbers (--scale, --bucket-mib, --timeout, --cluster's figures).
bool ParseDecimal(absl::string_view text, double* value);

// A CLI11 check of a number option: ParseDecimal's form (CLI::Number takes hexadecimal).
CLI::Validator DecimalNumber();

// A CLI11 check of an integer option: a whole number in plain digits within [min, max]
// ("must be a whole number in [0, 1048575], got 1e0"; CLI::Range says a value it cannot
// read is out of range).
CLI::Validator WholeNumber(int64_t min, int64_t max);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_OPTIONS_H_
