// `sdrt bench`'s rows for the sync model (bench_links.h, bench_layout_sync.cc): the links
// `sdrt simulate` takes, and a bound sync between two parallel layouts, every byte right.
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/bench_cli_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

using test::Bench;
using test::CommandResult;
using test::ParseRows;
using ::testing::HasSubstr;

// links: every figure positive and finite (the row's 64 MiB swapped right, whatever the
// bucket), one host of two ranks, and a --cluster text that `sdrt simulate` takes with the
// same links and the CPU executor; the text says it under the table. One rank has no
// partner: exit 2.
TEST(BenchCliTest, LinksRowGivesAClusterSimulateTakes) {
  const std::string links = "--workload tiny --tensors 10 --ops links --bucket-mib 1";
  CommandResult r = Bench(2, links + " --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = ParseRows(r);
  ASSERT_EQ(rows.size(), 1u);
  const nlohmann::json& row = rows[0];
  SCOPED_TRACE(row.dump());
  EXPECT_EQ(row.value("size", int64_t{0}), int64_t{64} << 20);
  EXPECT_EQ(row.value("wrong", int64_t{-1}), 0);
  EXPECT_EQ(row.value("flat_wrong", int64_t{-1}), 0);
  for (const char* key :
       {"pair_bytes_per_second", "nic_bytes_per_second", "copy_bytes_per_second", "time_ms"}) {
    const double value = row.value(key, 0.0);
    EXPECT_TRUE(std::isfinite(value) && value > 0) << key;
  }
  // The line's intercept, 0 when the small swap ran faster than the line.
  const double latency = row.value("latency_seconds", -1.0);
  EXPECT_TRUE(std::isfinite(latency) && latency >= 0 && latency < 1) << latency;
  EXPECT_EQ(row.value("nic_bytes_per_second", 0.0), row.value("pair_bytes_per_second", 1.0));
  EXPECT_EQ(row.value("nodes", 0), 1);
  EXPECT_EQ(row.value("gpus_per_node", 0), 2);
  const std::string cluster = row.value("cluster", "");
  EXPECT_TRUE(absl::StartsWith(cluster, "nodes=1,gpus=2,nvlink=")) << cluster;

  r = test::RunSdrt("simulate --model tiny-llama --from fsdp: --to vllm:tp=2 --cluster " +
                    test::ShellQuote(cluster) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json simulated = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(simulated.is_object()) << r.out;
  // The text keeps four digits.
  for (const auto& [simulated_key, measured_key] :
       {std::pair<const char*, const char*>{"nvlink_bytes_per_second", "pair_bytes_per_second"},
        {"latency_seconds", "latency_seconds"}}) {
    const double measured = row.value(measured_key, 0.0);
    EXPECT_NEAR(simulated.value(simulated_key, 0.0), measured, measured * 1e-3);
  }
  EXPECT_GT(simulated.value("predicted_seconds", 0.0), 0.0);
  EXPECT_EQ(simulated.value("device", ""), "cpu");

  r = Bench(2, links + " --iters 1 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("# links: pair "));
  EXPECT_THAT(r.out, HasSubstr(" -> sdrt simulate --cluster nodes=1,gpus=2,nvlink="));
  r = Bench(1, links);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("links needs 2 ranks or more"));
}

// sync_layout: a Megatron trainer of two pipeline stages (the first 19 Llama tensors: the
// embedding and two layers) bound into a tp engine on 2 ranks, the default fsdp -> tp on 3,
// and a Qwen3-MoE file of 8 experts per layer from tp x pp x ep 2 into an engine of ep 4 on 4:
// every byte of the engine right, the baseline exchanging the bytes each rank sends.
TEST(BenchCliTest, LayoutSyncRowFillsTheEngineExactly) {
  const std::string moe = test::FreshDir("bench_cli_moe") + "/qwen3-moe.safetensors";
  const CommandResult made =
      test::RunSdrt("make --arch qwen3-moe --scale 0.0625 " + test::ShellQuote(moe));
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  for (const auto& [ranks, args, from, to] :
       std::vector<std::tuple<int, std::string, std::string, std::string>>{
           {2, "--workload llama --tensors 19 --from megatron:pp=2 --to vllm:tp=2",
            "megatron:tp=1,pp=2,dp=1,ep=1,etp=1", "vllm:tp=2,pp=1,dp=1,ep=1"},
           {3, "--workload llama --tensors 19", "fsdp:dp=3", "vllm:tp=3,pp=1,dp=1,ep=1"},
           {4,
            "--workload " + test::ShellQuote(moe) +
                " --from megatron:tp=2,pp=2,ep=2 --to vllm:tp=2,dp=2,ep=4",
            "megatron:tp=2,pp=2,dp=1,ep=2,etp=1", "vllm:tp=2,pp=1,dp=2,ep=4"}}) {
    SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
    const CommandResult r =
        Bench(ranks, args + " --ops sync_layout --bucket-mib 1 --iters 1 --warmup 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json rows = ParseRows(r);
    ASSERT_EQ(rows.size(), 1u);
    const nlohmann::json& row = rows[0];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row.value("op", ""), "sync_layout");
    EXPECT_EQ(row.value("from", ""), from);
    EXPECT_EQ(row.value("to", ""), to);
    EXPECT_EQ(row.value("wrong", int64_t{-1}), 0);
    EXPECT_EQ(row.value("flat_wrong", int64_t{-1}), 0);
    EXPECT_GT(row.value("wire_bytes", int64_t{0}), 0);
    EXPECT_EQ(row.value("flat_wire_bytes", int64_t{0}), row.value("wire_bytes", int64_t{-1}));
    // 1 MiB buckets: several exchanges, then the closing.
    EXPECT_GT(row.value("exchanges", int64_t{0}), 1);
    EXPECT_EQ(row.value("collectives", int64_t{0}), row.value("exchanges", int64_t{0}) + 1);
  }
}

}  // namespace
}  // namespace sdrt
