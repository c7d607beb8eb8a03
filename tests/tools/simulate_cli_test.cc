// `sdrt simulate` (tools/sdrt/simulate.cc, internal/world_plan.h), run as the built binary:
// the whole world's plan between two parallel layouts from a built-in architecture or a
// header-only description, its byte counts where they can be worked out by hand (nothing
// moves between equal layouts on the same ranks; every byte once to an engine beside the
// trainer; a replicated engine's node takes each byte in once), and the input errors.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

using test::CommandResult;
using test::RunSdrt;
using test::ShellQuote;
using ::testing::HasSubstr;

nlohmann::json Simulate(const std::string& args) {
  const CommandResult r = RunSdrt("simulate --json " + args);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.all();
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// The bytes of `sdrt make --arch ARCH` (bfloat16, as simulate's built-in models).
int64_t ModelBytes(const std::string& arch_args) {
  const std::string file = test::TestTmpRoot() + "/simulate_model.safetensors";
  const CommandResult r = RunSdrt("make --json --overwrite " + arch_args + " " + ShellQuote(file));
  EXPECT_EQ(r.exit_code, 0) << r.all();
  return r.exit_code == 0 ? nlohmann::json::parse(r.out)["bytes"].get<int64_t>() : -1;
}

TEST(SimulateCli, ByteCountsThatCanBeWorkedOutByHand) {
  const int64_t bytes = ModelBytes("--arch tiny-llama");
  ASSERT_GT(bytes, 0);
  // The same layout on the same ranks: nothing moves.
  nlohmann::json same =
      Simulate("--model tiny-llama --from fsdp:dp=2 --to fsdp:dp=2 --cluster nodes=1,gpus=2");
  EXPECT_EQ(same["tensor_bytes"], bytes);
  EXPECT_EQ(same["wire_bytes"], 0);
  EXPECT_EQ(same["optimum_bytes"], 0);
  // Beside it, on the next node: every byte once, all of it between the nodes.
  nlohmann::json beside = Simulate(
      "--model tiny-llama --from fsdp:dp=2 --to fsdp:dp=2 --disjoint --cluster nodes=2,gpus=2");
  EXPECT_EQ(beside["ranks"], 4);
  EXPECT_EQ(beside["wire_bytes"], bytes);
  EXPECT_EQ(beside["internode_bytes"], bytes);
  EXPECT_EQ(beside["max_node_sent_bytes"], bytes);
  EXPECT_EQ(beside["max_node_received_bytes"], bytes);
  // Two whole replicas on the next node: each needs every byte (wire 2x), which enters the
  // node once and is forwarded there.
  nlohmann::json replicas = Simulate(
      "--model tiny-llama --from fsdp:dp=2 --to vllm:tp=1,dp=2 --disjoint --cluster "
      "nodes=2,gpus=2");
  EXPECT_EQ(replicas["wire_bytes"], 2 * bytes);
  EXPECT_EQ(replicas["optimum_bytes"], 2 * bytes);
  EXPECT_EQ(replicas["internode_bytes"], bytes);
  EXPECT_EQ(replicas["max_received_bytes"], bytes);
  EXPECT_EQ(replicas["lower_bound_bytes"], bytes);
  // One rank's plan keeps its share of every rank's messages: each message is one rank's
  // send and another's receive.
  int64_t shares = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const nlohmann::json r = Simulate(
        "--model tiny-llama --from fsdp:dp=2 --to vllm:tp=1,dp=2 --disjoint --cluster "
        "nodes=2,gpus=2 --rank " +
        std::to_string(rank));
    EXPECT_EQ(r["messages"], replicas["messages"]);
    EXPECT_GT(r["plan_seconds"].get<double>(), 0);
    EXPECT_GT(r["world_plan_seconds"].get<double>(), 0);
    EXPECT_GE(r["world_peak_rss_bytes"].get<int64_t>(), r["peak_rss_bytes"].get<int64_t>());
    shares += r["rank_messages"].get<int64_t>();
  }
  EXPECT_GT(replicas["messages"].get<int64_t>(), 0);
  EXPECT_EQ(shares, 2 * replicas["messages"].get<int64_t>());
}

TEST(SimulateCli, AHeaderOnlyDescriptionPlansAsItsArchitecture) {
  const std::string file = test::TestTmpRoot() + "/simulate_kimi.safetensors";
  const CommandResult made =
      RunSdrt("make --arch kimi-k2 --scale 0.05 --header-only --overwrite " + ShellQuote(file));
  ASSERT_EQ(made.exit_code, 0) << made.all();
  const std::string layouts =
      " --from megatron:tp=2,pp=2 --to vllm:tp=2,dp=2 --cluster nodes=2,gpus=2";
  nlohmann::json from_file = Simulate("--model " + ShellQuote(file) + layouts);
  nlohmann::json built_in = Simulate("--model kimi-k2 --scale 0.05" + layouts);
  for (const char* key : {"tensors", "tensor_bytes", "wire_bytes", "optimum_bytes",
                          "internode_bytes", "max_sent_bytes", "distinct_layouts"}) {
    EXPECT_EQ(from_file[key], built_in[key]) << key;
  }
  EXPECT_EQ(from_file["wire_bytes"], from_file["optimum_bytes"]);
  EXPECT_EQ(from_file["from"], "megatron:tp=2,pp=2,dp=1,ep=1,etp=2");
  EXPECT_GT(from_file["kept_messages"].get<int64_t>(), 0);
}

TEST(SimulateCli, PredictsTheSyncAndTheBaselinesOnTheLinksGiven) {
  // Each rank sends its half to its counterpart on the next node: one message per rank and
  // exchange over the NIC, so the sync is about a half over the NIC (plus packing and
  // latency); the funnel moves every byte twice and the broadcast every byte to both.
  const std::string layouts = "--model tiny-llama --from fsdp:dp=2 --to fsdp:dp=2 --disjoint ";
  const std::string links = ",nvlink=10GB/s,latency=0s,copy=1TB/s";
  const std::string args = layouts + "--cluster nodes=2,gpus=2,nic=1GB/s" + links;
  nlohmann::json p = Simulate(args);
  EXPECT_EQ(p["nic_bytes_per_second"], 1e9);
  EXPECT_EQ(p["nvlink_bytes_per_second"], 1e10);
  EXPECT_EQ(p["latency_seconds"], 0.0);
  EXPECT_EQ(p["copy_bytes_per_second"], 1e12);
  const auto bytes = p["tensor_bytes"].get<double>();
  const auto busiest = p["max_nic_bytes"].get<double>();
  EXPECT_GE(busiest, bytes / 2);
  EXPECT_LT(busiest, bytes / 2 * 1.1);
  EXPECT_EQ(p["max_nvlink_bytes"], 0);
  const auto predicted = p["predicted_seconds"].get<double>();
  EXPECT_GE(predicted, busiest / 1e9);
  EXPECT_LT(predicted, busiest / 1e9 * 1.05);
  EXPECT_GE(predicted, p["bound_seconds"].get<double>());
  EXPECT_GT(p["funnel_seconds"].get<double>(), 1.5 * predicted);
  EXPECT_GT(p["bucketed_broadcast_seconds"].get<double>(), 1.5 * predicted);
  // Ten times the NIC: a tenth of the time.
  nlohmann::json fast = Simulate(layouts + "--cluster nodes=2,gpus=2,nic=10GB/s" + links);
  EXPECT_NEAR(fast["predicted_seconds"].get<double>(), predicted / 10, predicted / 50);
  // An FP8 engine: the linear layers' weights travel in one byte (the narrower side's
  // dtype), the norms and embeddings in two.
  nlohmann::json fp8 = Simulate(args + " --dtype-to fp8");
  EXPECT_EQ(fp8["dtype_to"], "float8_e4m3fn");
  EXPECT_EQ(Simulate(args + " --dtype-to FP8")["wire_bytes"], fp8["wire_bytes"]);
  // Exponents and every unit: 1e3 GB/s is 1 TB/s, 400 Gb/s is 50 GB/s, 1ms is 1e-3 s.
  nlohmann::json units =
      Simulate(layouts + "--cluster nodes=2,gpus=2,nvlink=1e3GB/s,nic=400Gb/s,latency=1ms");
  EXPECT_EQ(units["nvlink_bytes_per_second"], 1e12);
  EXPECT_EQ(units["nic_bytes_per_second"], 50e9);
  EXPECT_EQ(units["latency_seconds"], 1e-3);
  const CommandResult text =
      RunSdrt("simulate " + layouts + "--cluster nodes=2,gpus=2,latency=1ms");
  EXPECT_THAT(text.out, HasSubstr("latency 1 ms,")) << text.all();
  EXPECT_LT(fp8["wire_bytes"].get<double>(), 0.7 * p["wire_bytes"].get<double>());
  EXPECT_GT(fp8["wire_bytes"].get<double>(), 0.5 * p["wire_bytes"].get<double>());
  EXPECT_LT(fp8["predicted_seconds"].get<double>(), 0.7 * predicted);
  // Copies as slow as the NIC, tensors of 64 KiB and more: a GPU packs and unpacks every
  // byte (about three times the wire), the CPU executor sends each piece (fsdp to fsdp: one
  // dense range) from its local into its local (the wire alone).
  const std::string slow =
      "--model tiny-llama --scale 8 --from fsdp:dp=2 --to fsdp:dp=2 --disjoint "
      "--cluster nodes=2,gpus=2,nic=1GB/s,latency=0s,copy=1GB/s";
  const nlohmann::json gpu = Simulate(slow);
  const nlohmann::json cpu = Simulate(slow + ",device=cpu");
  EXPECT_EQ(gpu["device"], "gpu");
  EXPECT_EQ(cpu["device"], "cpu");
  const double wire = gpu["max_nic_bytes"].get<double>() / 1e9;
  EXPECT_GT(gpu["predicted_seconds"].get<double>(), 2.5 * wire);
  EXPECT_LT(cpu["predicted_seconds"].get<double>(), 1.05 * wire);
}

TEST(SimulateCli, InputErrorsAreExitTwo) {
  const std::string ok = " --from fsdp:dp=2 --to fsdp:dp=2";
  const std::pair<std::string, std::string> cases[] = {
      {"--model tiny-llama" + ok + " --cluster nodes=2", "nodes and gpus are both needed"},
      {"--model tiny-llama" + ok + " --cluster nodes=2,gpus=0", "\"gpus=0\" is not key=N"},
      {"--model tiny-llama" + ok + " --disjoint --cluster nodes=1,gpus=3",
       "need 4 ranks; the cluster has 1 x 3 = 3"},
      {"--model tiny-llama" + ok + " --disjoint --cluster nodes=1,gpus=2",
       "takes all 2 ranks of the cluster: none are left"},
      {"--model tiny-llama" + ok + " --cluster nodes=1024,gpus=9", "more than 8192 ranks"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2=3", "\"gpus=2=3\" is not key=N"},
      {"--model " + ShellQuote(SDRT_BINARY) + " --scale 0.5" + ok + " --cluster nodes=1,gpus=2",
       "--scale goes with an architecture"},
      {"--model " + ShellQuote(SDRT_BINARY) + " --scale 1" + ok + " --cluster nodes=1,gpus=2",
       "--scale goes with an architecture"},
      {"--model tiny-llama --scale 0x1p-3" + ok + " --cluster nodes=1,gpus=2",
       "--scale: must be a decimal number, got 0x1p-3"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2 --rank 2", "--rank 2 is outside"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2 --rank 1e0",
       "--rank: must be a whole number in [0, 1048575], got 1e0"},
      {"--model no-such-model" + ok + " --cluster nodes=1,gpus=2", "no such file or folder"},
      {"--model tiny-llama --from megatron:tp=3 --to fsdp: --cluster nodes=1,gpus=2",
       "does not divide the world of 2"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=50", "needs a unit"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=0GB/s", "out of range"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,latency=2s", "0 to 1 s"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,device=tpu",
       "\"device=tpu\" is not device=gpu or device=cpu"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=GB/s", "has no number"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=1.2.3GB/s", "has no number"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=0x10GB/s", "has no number"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=infGB/s", "has no number"},
      {"--model tiny-llama" + ok + " --cluster 'nodes=1,gpus=2,nic= 0x1 GB/s'", "has no number"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nic=1GB/s,nic=2GB/s",
       "nic given twice"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nvlink=0.5MB/s", "1 MB/s to 1 PB/s"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2,nvlink=-5GB/s", "out of range"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2 --dtype-to ''",
       "not a dtype an engine keeps"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2 --dtype-to float8_e8m0fnu",
       "not a dtype an engine keeps"},
      {"--model tiny-llama" + ok + " --cluster nodes=1,gpus=2 --dtype-to int4", "int4"},
  };
  for (const auto& [args, message] : cases) {
    const CommandResult r = RunSdrt("simulate " + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.all();
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

}  // namespace
}  // namespace sdrt
