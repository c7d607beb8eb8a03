// `sdrt bench` as the built binary under mpiexec (this test is one process; it starts
// `mpiexec -n N sdrt bench ...` itself): the JSON list (one row per op, every byte right,
// ratios above zero), the digests of the synthetic workloads pinned so that their bytes
// cannot drift from bench/peer/pytorch_distributed_peer.py's, a safetensors file and a
// folder of them as workloads (every dtype, a 0-dim tensor, empty and uneven shards), the
// text table's header, and bad arguments (exit 2, one line on stderr, nothing on stdout).
// The links and sync_layout rows: bench_sync_cli_test.cc.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
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

// The digests bench/RESULTS.md and the PyTorch peer print for the synthetic workloads.
constexpr const char* kSmallDigest = "34edf58feaf5cf63";
constexpr const char* kLlamaDigest = "ca87fcac5ad17ff1";
const std::vector<std::string> kOps = {"gather", "gather_r0_off", "broadcast", "distribute"};

// Every row of `rows` is right: the ops in order, nothing wrong, ratios above zero, and
// the workload, digest, tensor count and ranks given.
void ExpectGoodRows(const nlohmann::json& rows, const std::vector<std::string>& ops,
                    const std::string& workload, const std::string& digest, int64_t count,
                    int ranks) {
  ASSERT_EQ(rows.size(), ops.size()) << rows.dump(1);
  for (size_t i = 0; i < ops.size(); ++i) {
    const nlohmann::json& row = rows[i];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row.value("op", ""), ops[i]);
    EXPECT_EQ(row.value("workload", ""), workload);
    if (!digest.empty()) {
      EXPECT_EQ(row.value("digest", ""), digest);
    }
    EXPECT_EQ(row.value("count", int64_t{-1}), count);
    EXPECT_EQ(row.value("ranks", -1), ranks);
    EXPECT_EQ(row.value("wrong", int64_t{-1}), 0);
    EXPECT_EQ(row.value("flat_wrong", int64_t{-1}), 0);
    EXPECT_FALSE(row.contains("wire_bytes"));  // only the rows that plan a reshard count them
    EXPECT_GT(row.value("ratio", 0.0), 0.0);
    EXPECT_GT(row.value("ratio_fresh", 0.0), 0.0);
    EXPECT_GT(row.value("time_ms", 0.0), 0.0);
    EXPECT_LE(row.value("time_min_ms", 1.0), row.value("time_ms", 0.0));
    EXPECT_GE(row.value("time_max_ms", 0.0), row.value("time_ms", 1.0));
    EXPECT_EQ(row.value("root", -2), absl::StartsWith(ops[i], "broadcast") ? 0 : -1);
    EXPECT_EQ(row.value("backend", ""), "mpi");
    EXPECT_EQ(row.value("device", ""), "cpu");
    EXPECT_GE(row.value("cores", 0), 1);
    EXPECT_EQ(row["time_runs_ms"].size(), 2u);
    // No collective per tensor: the agreements, one exchange per bucket and the closing
    // (distribute: none).
    const int64_t collectives = row.value("collectives", int64_t{-1});
    EXPECT_GE(collectives, 0);
    EXPECT_LE(collectives, 4);
  }
}

// The fingerprint of internal/bench_workloads.h, computed here independently.
std::string Digest(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  uint64_t digest = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto* p = static_cast<const unsigned char*>(tensors[t].second.data_ptr());
    const int64_t n = tensors[t].second.nbytes();
    uint64_t sum = 0;
    for (int64_t j = 0; j * 8 < n; ++j) {
      uint64_t word = 0;
      std::memcpy(&word, p + j * 8, static_cast<size_t>(std::min<int64_t>(8, n - j * 8)));
      sum += word * (2 * static_cast<uint64_t>(j) + 1);
    }
    digest += sum * (t + 1);
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

TEST(BenchCliTest, SmallWorkloadJsonOnOneTwoAndThreeRanks) {
  for (int ranks : {1, 2, 3}) {  // 3: uneven shards, the flat all-gather's Iallgatherv
    SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
    const CommandResult r = Bench(ranks, "--workload small --iters 2 --warmup 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    ExpectGoodRows(ParseRows(r), kOps, "small", kSmallDigest, 10000, ranks);
  }
}

// Inputs in one arena per rank: the same bytes (digest) and every result right, at 3 ranks
// (uneven pieces at arena offsets).
TEST(BenchCliTest, ArenaInputsGiveTheSameBytes) {
  const CommandResult r = Bench(3, "--workload small --inputs arena --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = ParseRows(r);
  ExpectGoodRows(rows, kOps, "small", kSmallDigest, 10000, 3);
  for (const nlohmann::json& row : rows) EXPECT_EQ(row.value("inputs", ""), "arena");
}

TEST(BenchCliTest, LlamaDigest) {
  const CommandResult r = Bench(1, "--workload llama --ops distribute --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = ParseRows(r);
  ExpectGoodRows(rows, {"distribute"}, "llama", kLlamaDigest, 291, 1);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].value("size", int64_t{0}), 251003904);
  EXPECT_EQ(rows[0].value("type", ""), "bfloat16");
}

// gather_partial: 10,000 Partial(max) tensors gathered right on 1-3 ranks with one
// all-reduce for all of them (one bucket) after the agreement, then the closing; none on one
// rank. Every rank then holds every tensor: nothing else moves.
TEST(BenchCliTest, GatherPartialReducesEveryTensorInOneBucket) {
  for (int ranks : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
    const CommandResult r =
        Bench(ranks, "--workload small --ops gather_partial --iters 2 --warmup 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json rows = ParseRows(r);
    ExpectGoodRows(rows, {"gather_partial"}, "small", kSmallDigest, 10000, ranks);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].value("collectives", int64_t{-1}), ranks == 1 ? 1 : 3);
  }
}

// The planned rows: 10,000 tensors gathered, broadcast and distributed right on 1-3 ranks
// by reshard plans made once into DTensors the caller allocated: per call the agreement (a
// planned row), one exchange (every tensor's piece to a peer in one message) and the
// closing; nothing but the agreement where every copy is local (distribute, one rank).
TEST(BenchCliTest, PlannedRowsMoveEveryTensorInOneExchange) {
  for (int ranks : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
    const CommandResult r = Bench(ranks,
                                  "--workload small --ops gather_planned,broadcast_planned,"
                                  "distribute_planned,gather_bound,broadcast_bound,"
                                  "distribute_bound --iters 2 --warmup 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json rows = ParseRows(r);
    ExpectGoodRows(rows,
                   {"gather_planned", "broadcast_planned", "distribute_planned", "gather_bound",
                    "broadcast_bound", "distribute_bound"},
                   "small", kSmallDigest, 10000, ranks);
    ASSERT_EQ(rows.size(), 6u);
    for (const nlohmann::json& row : rows) {
      const bool bound = absl::EndsWith(row.value("op", ""), "_bound");
      const bool local = ranks == 1 || absl::StartsWith(row.value("op", ""), "distribute");
      EXPECT_EQ(row.value("collectives", int64_t{-1}), (bound ? 0 : 1) + (local ? 0 : 2))
          << row.dump();
    }
  }
}

// sync_mapped: the first 19 Llama tensors (the embedding and two whole layers) bound into a
// tp engine's fused buffers through vllm-llama on 2 ranks, every byte right, in the same
// two collectives per call as the unmapped bound sync (the exchange and the closing); a
// workload without Llama names is exit 2.
TEST(BenchCliTest, MappedSyncRowFusesIntoTheEnginesBuffers) {
  CommandResult r =
      Bench(2, "--workload llama --tensors 19 --ops sync_mapped --iters 1 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = ParseRows(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].value("op", ""), "sync_mapped");
  EXPECT_EQ(rows[0].value("wrong", int64_t{-1}), 0) << rows[0].dump();
  EXPECT_EQ(rows[0].value("flat_wrong", int64_t{-1}), 0) << rows[0].dump();
  EXPECT_EQ(rows[0].value("collectives", int64_t{-1}), 2) << rows[0].dump();
  r = Bench(2, "--workload small --ops sync_mapped --iters 1 --warmup 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("sync_mapped needs --workload llama"));
}

// sync_fp8: the same sync into float8_e4m3fn linear weights with per-tensor scales: every
// code and scale right, half the wire bytes of the bfloat16 sync (the codes; the scales go by
// one all-reduce of amaxes: a third collective), and the text says so under the table.
TEST(BenchCliTest, Fp8SyncRowHalvesTheWireBytes) {
  CommandResult r =
      Bench(2, "--workload llama --tensors 19 --ops sync_fp8 --iters 1 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = ParseRows(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].value("op", ""), "sync_fp8");
  EXPECT_EQ(rows[0].value("wrong", int64_t{-1}), 0) << rows[0].dump();
  EXPECT_EQ(rows[0].value("collectives", int64_t{-1}), 3) << rows[0].dump();
  const int64_t wire = rows[0].value("wire_bytes", int64_t{0});
  const int64_t bf16 = rows[0].value("flat_wire_bytes", int64_t{0});
  ASSERT_GT(bf16, 0) << rows[0].dump();
  EXPECT_LE(wire * 100, bf16 * 55) << rows[0].dump();
  r = Bench(2, "--workload llama --tensors 19 --ops sync_fp8 --iters 1 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("# sync_fp8: wire bytes "));
}

TEST(BenchCliTest, RegroupRowFillsTheFusedBuffersExactly) {
  // 19 tensors: two layers' attention and MLP weights, so linear_qkv and linear_fc1 exist.
  const CommandResult r =
      Bench(2,
            "--workload llama --tensors 19 --ops sync_mapped,sync_regroup --iters 1 "
            "--warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = ParseRows(r);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].value("op", ""), "sync_regroup");
  EXPECT_EQ(rows[1].value("wrong", int64_t{-1}), 0) << rows[1].dump();
  EXPECT_EQ(rows[1].value("flat_wrong", int64_t{-1}), 0) << rows[1].dump();
}

TEST(BenchCliTest, OpsAndTensorsSelectRowsAndTensors) {
  const CommandResult r =
      Bench(2, "--workload small --tensors 50 --ops distribute,gather --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Rows in the fixed order, whatever the order asked; the digest is of the 50 tensors.
  ExpectGoodRows(ParseRows(r), {"gather", "distribute"}, "small", "", 50, 2);
}

TEST(BenchCliTest, SafetensorsFileAndFolderWorkloads) {
  const std::string dir = test::FreshDir("bench_cli_file");
  const std::vector<std::pair<std::string, Tensor>> mixed = test::MixedStateDict();
  const std::string file = dir + "/mixed.safetensors";
  test::WriteSource(file, mixed);
  std::vector<std::pair<std::string, Tensor>> in_order;  // the file's data order
  {
    absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(file);
    ASSERT_TRUE(opened.ok()) << opened.status();
    for (const SafetensorsEntry& e : opened->entries()) {
      in_order.emplace_back(e.name, *opened->Get(e.name));
    }
    for (int ranks : {3, 4}) {  // dims shorter than the mesh: empty shards; a 0-dim tensor
      SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
      const CommandResult r =
          Bench(ranks, "--workload " + test::ShellQuote(file) + " --iters 2 --warmup 0 --json");
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      const nlohmann::json rows = ParseRows(r);
      ExpectGoodRows(rows, kOps, file, Digest(in_order), static_cast<int64_t>(mixed.size()), ranks);
      for (const nlohmann::json& row : rows) EXPECT_EQ(row.value("type", ""), "mixed");
    }
  }
  // A folder of two safetensors files without an index (CheckpointSource).
  const std::string folder = test::FreshDir("bench_cli_folder");
  const size_t half = mixed.size() / 2;
  test::WriteSource(folder + "/a.safetensors", {mixed.begin(), mixed.begin() + half});
  test::WriteSource(folder + "/b.safetensors", {mixed.begin() + half, mixed.end()});
  const CommandResult r =
      Bench(2, "--workload " + test::ShellQuote(folder) + " --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ExpectGoodRows(ParseRows(r), kOps, folder, "", static_cast<int64_t>(mixed.size()), 2);
}

// Workloads bench cannot time are exit 2 on every rank, never a signal or a hang: an sdrt
// sharded folder (pieces, not whole tensors), and ranks that see other files at one path
// (the flat baselines would wait for each other's bytes without a deadline).
TEST(BenchCliTest, WorkloadsEveryRankCannotTimeAreExitTwo) {
  const std::string dir = test::FreshDir("bench_cli_refused");
  const std::vector<std::pair<std::string, Tensor>> mixed = test::MixedStateDict();
  test::WriteSource(dir + "/mixed.safetensors", mixed);
  const std::string binary = test::ShellQuote(SDRT_BINARY);
  const CommandResult shard = test::RunCommand(
      absl::StrCat(binary, " shard ", test::ShellQuote(dir + "/mixed.safetensors"), " ",
                   test::ShellQuote(dir + "/sharded"), " --mesh 2 --plan fsdp"));
  ASSERT_EQ(shard.exit_code, 0) << shard.out << shard.err;
  CommandResult r = Bench(2, "--workload " + test::ShellQuote(dir + "/sharded") + " --iters 1");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("is an sdrt sharded folder; bench takes a checkpoint of whole"));
  // Rank 0 and rank 1 run in folders that hold other files under one name.
  for (const char* rank : {"a", "b"}) test::FreshDir(absl::StrCat("bench_cli_refused/", rank));
  test::WriteSource(dir + "/a/m.safetensors", mixed);
  test::WriteSource(dir + "/b/m.safetensors", {mixed.begin(), mixed.begin() + 2});
  std::string command = test::ShellQuote(SDRT_MPIEXEC);
  for (const char* rank : {"a", "b"}) {
    absl::StrAppend(&command, rank[0] == 'a' ? "" : " :", " ", SDRT_MPIEXEC_NUMPROC_FLAG,
                    " 1 -wdir ", test::ShellQuote(absl::StrCat(dir, "/", rank)), " ", binary,
                    " bench --workload m.safetensors --iters 1 --timeout 20");
  }
  r = test::RunCommand(command);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 1 sees 2 tensors"));
  EXPECT_THAT(r.err, HasSubstr("every rank must see the same checkpoint"));
}

TEST(BenchCliTest, TextHeaderAndColumns) {
  const CommandResult r = Bench(2, "--workload small --tensors 20 --iters 2 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("# sdrt bench: workload small: 20 tensors"));
  EXPECT_THAT(r.out, HasSubstr(", float32, digest "));
  EXPECT_THAT(r.out, HasSubstr("2 ranks, backend mpi ("));
  EXPECT_THAT(r.out, HasSubstr("device cpu; sdrt "));
  EXPECT_THAT(r.out, HasSubstr("time: ms"));
  EXPECT_THAT(r.out, testing::ContainsRegex(
                         "op +size +count +type +root +time +\\[min\\.\\.max\\] +algbw +busbw "
                         "+#wrong +sdrt/flat +sdrt/fresh +collectives\n"));
  for (const std::string& op : kOps) EXPECT_THAT(r.out, HasSubstr("\n" + op + " "));
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(BenchCliTest, BadArgumentsExitTwo) {
  for (const std::string& args :
       {std::string("--ops nonsense"), std::string("--ops ,"), std::string("--iters 0"),
        std::string("--warmup -1"), std::string("--bucket-mib 0"),
        std::string("--workload /nonexistent"), std::string("--tensors -3"),
        std::string("--inputs pinned"),
        // sync_layout's layouts: bad, of another world size, or without the row.
        std::string("--ops sync_layout --from megatron:tp=3"),
        std::string("--ops sync_layout --from megatron:tp=1,dp=1"),
        std::string("--ops sync_layout --to vllm:tp=4"),
        std::string("--ops sync_layout --from nonsense:"),
        std::string("--ops gather --from fsdp:")}) {
    SCOPED_TRACE(args);
    const CommandResult r = Bench(2, args + " --json");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    // One line, printed once (rank 0's), naming the option.
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("sdrt bench: "));
  }
  // A missing all-MiniLM-L6-v2 says how to get it.
  const CommandResult r = test::RunCommand(
      absl::StrCat("SDRT_CACHE_DIR=", test::ShellQuote(test::FreshDir("bench_cli_no_cache")), " ",
                   test::ShellQuote(SDRT_MPIEXEC), " ", SDRT_MPIEXEC_NUMPROC_FLAG, " 2 ",
                   test::ShellQuote(SDRT_BINARY), " bench --workload minilm"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("scripts/fetch-model.sh"));
}

}  // namespace
}  // namespace sdrt
