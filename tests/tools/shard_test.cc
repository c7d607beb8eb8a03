// `sdrt make`, `sdrt shard` and `sdrt inspect DIR`, run as the built binary: outputs,
// round trips of what they write, exit codes and one-line errors.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using test::CommandResult;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(std::string(SDRT_BINARY) + " " + args);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One line on stderr, nothing on stdout.
void ExpectOneLineError(const CommandResult& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, code) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  for (const std::string& p : parts) EXPECT_THAT(r.err, HasSubstr(p));
}

TEST(SdrtMake, TinyLlamaIsDeterministic) {
  const std::string root = test::FreshDir("shard_test_make");
  CommandResult a = Sdrt("make --arch tiny-llama --dtype f32 --seed 7 " + root + "/a.safetensors");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_THAT(a.out, AllOf(HasSubstr("tiny-llama"), HasSubstr("21 tensors"),
                           HasSubstr("123,712 parameters")));
  CommandResult b = Sdrt("make --arch tiny-llama --dtype f32 --seed 7 " + root + "/b.safetensors");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  CommandResult c = Sdrt("make --arch tiny-llama --dtype f32 --seed 8 " + root + "/c.safetensors");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(ReadBytes(root + "/a.safetensors"), ReadBytes(root + "/b.safetensors"));
  EXPECT_NE(ReadBytes(root + "/a.safetensors"), ReadBytes(root + "/c.safetensors"));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(root + "/a.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->entries().size(), 21u);
  EXPECT_EQ(file->Find("model.embed_tokens.weight")->shape, (IntVector{256, 64}));
  EXPECT_EQ(file->Find("model.layers.1.self_attn.k_proj.weight")->shape, (IntVector{32, 64}));
  EXPECT_EQ(file->Find("model.layers.1.mlp.down_proj.weight")->shape, (IntVector{64, 172}));
  EXPECT_EQ(file->Find("model.norm.weight")->shape, (IntVector{64}));
  EXPECT_EQ(file->Find("lm_head.weight")->dtype, DType::kFloat32);
  EXPECT_EQ(file->metadata().at("sdrt.arch"), "tiny-llama");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  // Norms near 1, weights within 1/sqrt(fan_in).
  const Tensor norm = *file->Get("model.norm.weight");
  const Tensor q = *file->Get("model.layers.0.self_attn.q_proj.weight");
  for (int64_t i = 0; i < norm.numel(); ++i) {
    EXPECT_NEAR(norm.data<float>()[i], 1.0f, 0.1f);
  }
  for (int64_t i = 0; i < q.numel(); ++i) EXPECT_LE(std::abs(q.data<float>()[i]), 0.125f);
}

TEST(SdrtMake, ScaledArchitecturesKeepRatios) {
  const std::string root = test::FreshDir("shard_test_make_scaled");
  CommandResult r =
      Sdrt("make --arch llama-8b --scale 0.05 --seed 1 --json " + root + "/l.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["hidden"], 192);  // 32 heads x round(128 x 0.05)
  EXPECT_EQ(j["head_dim"], 6);
  EXPECT_EQ(j["heads"], 32);
  EXPECT_EQ(j["kv_heads"], 8);
  EXPECT_EQ(j["intermediate"], 717);
  EXPECT_EQ(j["vocab"], 6413);
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["dtype"], "bfloat16");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(root + "/l.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("model.layers.1.self_attn.q_proj.weight")->shape, (IntVector{192, 192}));
  EXPECT_EQ(file->Find("model.layers.1.self_attn.v_proj.weight")->shape, (IntVector{48, 192}));
  EXPECT_EQ(file->Find("model.layers.1.mlp.gate_proj.weight")->shape, (IntVector{717, 192}));
  EXPECT_EQ(file->Find("lm_head.weight")->shape, (IntVector{6413, 192}));
  EXPECT_EQ(file->Find("lm_head.weight")->dtype, DType::kBFloat16);
  EXPECT_EQ(file->Find("model.layers.2.self_attn.q_proj.weight"), nullptr);

  ASSERT_EQ(
      Sdrt("make --arch bert-base --scale 0.05 --dtype f16 " + root + "/b.safetensors").exit_code,
      0);
  file = SafetensorsFile::Open(root + "/b.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("encoder.layer.0.attention.self.query.weight")->shape, (IntVector{36, 36}));
  EXPECT_EQ(file->Find("encoder.layer.0.intermediate.dense.weight")->shape, (IntVector{154, 36}));
  EXPECT_EQ(file->Find("embeddings.position_ids")->dtype, DType::kInt64);
  EXPECT_EQ(file->Find("embeddings.word_embeddings.weight")->dtype, DType::kFloat16);

  ASSERT_EQ(Sdrt("make --arch gpt2 --scale 0.05 " + root + "/g.safetensors").exit_code, 0);
  file = SafetensorsFile::Open(root + "/g.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("h.0.attn.c_attn.weight")->shape, (IntVector{36, 108}));
  EXPECT_EQ(file->Find("h.0.mlp.c_proj.weight")->shape, (IntVector{154, 36}));
  EXPECT_EQ(file->Find("wte.weight")->shape, (IntVector{2513, 36}));
}

TEST(SdrtMake, BadArguments) {
  const std::string root = test::FreshDir("shard_test_make_bad");
  ExpectOneLineError(Sdrt("make --arch llama-9b " + root + "/x.safetensors"), 2,
                     {"unknown arch \"llama-9b\"", "tiny-llama"});
  ExpectOneLineError(Sdrt("make --dtype f8 " + root + "/x.safetensors"), 2, {"--dtype"});
  ExpectOneLineError(Sdrt("make --scale 0 " + root + "/x.safetensors"), 2, {"--scale"});
  ExpectOneLineError(Sdrt("make " + root + "/no/such/x.safetensors"), 2, {root + "/no/such"});
  EXPECT_EQ(Sdrt("make").exit_code, 2);
  EXPECT_FALSE(fs::exists(root + "/x.safetensors"));
}

TEST(SdrtShard, EveryPlanRoundTripsAndInspects) {
  const std::string root = test::FreshDir("shard_test_shard");
  ASSERT_EQ(Sdrt("make --arch tiny-llama --seed 3 " + root + "/tiny.safetensors").exit_code, 0);
  const SafetensorsFile source = *SafetensorsFile::Open(root + "/tiny.safetensors");
  struct Case {
    const char* plan;
    const char* mesh;
  };
  for (const Case& c : {Case{"fsdp", "4"}, Case{"fsdp", "3"}, Case{"tp", "4"}, Case{"tp", "3"},
                        Case{"hsdp", "2x2"}, Case{"fsdp-tp", "2x2"}, Case{"fsdp-tp", "3x2"}}) {
    SCOPED_TRACE(absl::StrCat(c.plan, " on ", c.mesh));
    const std::string dir = absl::StrCat(root, "/", c.plan, "_", c.mesh);
    CommandResult r = Sdrt(absl::StrCat("shard ", root, "/tiny.safetensors ", dir, " --mesh ",
                                        c.mesh, " --plan ", c.plan));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out,
                AllOf(HasSubstr(absl::StrCat("plan ", c.plan)), HasSubstr("rank-00000-of-")));
    test::ExpectRoundTrip(dir, source);

    CommandResult table = Sdrt("inspect " + dir);
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_THAT(table.out,
                AllOf(HasSubstr("sharded checkpoint"), HasSubstr("placements"), HasSubstr("rank 0"),
                      HasSubstr("model.embed_tokens.weight"), HasSubstr("21 tensors")));
    CommandResult json = Sdrt("inspect --json " + dir);
    ASSERT_EQ(json.exit_code, 0) << json.err;
    const nlohmann::json j = nlohmann::json::parse(json.out);
    const int64_t world = j["world_size"];
    EXPECT_EQ(j["files"].size(), static_cast<size_t>(world));
    EXPECT_EQ(j["entries"].size(), 21u);
    for (const nlohmann::json& e : j["entries"]) {
      EXPECT_EQ(e["local_shapes"].size(), static_cast<size_t>(world));
      EXPECT_EQ(e["xxh64"].get<std::string>().size(), 16u);
    }
  }
  // fsdp-tp on 2x2: the q projection is a _StridedShard over TP's Shard(0).
  CommandResult table = Sdrt("inspect " + root + "/fsdp-tp_2x2");
  EXPECT_THAT(table.out, HasSubstr("[_S(0, 2), S(0)]"));
  EXPECT_THAT(table.out, HasSubstr("[S(0), S(1)]"));
}

TEST(SdrtShard, JsonDimNamesOverwriteAndManyRanks) {
  const std::string root = test::FreshDir("shard_test_shard_json");
  ASSERT_EQ(Sdrt("make --dtype f16 " + root + "/tiny.safetensors").exit_code, 0);
  const std::string dir = root + "/ckpt";
  CommandResult r = Sdrt("shard " + root + "/tiny.safetensors " + dir +
                         " --mesh 2x2 --plan fsdp-tp --mesh-dim-names dp,tp --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["plan"], "fsdp-tp");
  EXPECT_EQ(j["mesh"]["dim_names"], nlohmann::json::array({"dp", "tp"}));
  EXPECT_EQ(j["files"].size(), 4u);
  EXPECT_EQ(j["tensors"], 21);
  EXPECT_THAT(Sdrt("inspect " + dir).out, HasSubstr("mesh 2x2 (dp, tp)"));

  ExpectOneLineError(Sdrt("shard " + root + "/tiny.safetensors " + dir + " --mesh 4 --plan fsdp"),
                     2, {dir, "overwrite"});
  r = Sdrt("shard " + root + "/tiny.safetensors " + dir + " --mesh 9 --plan fsdp --overwrite");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile source = *SafetensorsFile::Open(root + "/tiny.safetensors");
  test::ExpectRoundTrip(dir, source);
  // Nine ranks: one summary column of distinct local shapes with counts.
  CommandResult table = Sdrt("inspect " + dir);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, AllOf(HasSubstr("local shapes (x ranks)"), HasSubstr("[29, 64] x8"),
                               HasSubstr("[24, 64] x1"), Not(HasSubstr("rank 8 "))));
}

TEST(SdrtShard, PlanJsonFile) {
  const std::string root = test::FreshDir("shard_test_plan_json");
  ASSERT_EQ(Sdrt("make --dtype f32 " + root + "/tiny.safetensors").exit_code, 0);
  {
    std::ofstream plan(root + "/PLAN.json");
    plan << R"({"rules": [{"pattern": "_proj\\.weight$", "placements": "[S(1), R]"},
                          {"pattern": "norm", "placements": "[R, R]"}],
                "default": "[R, S(0)]"})";
  }
  const SafetensorsFile source = *SafetensorsFile::Open(root + "/tiny.safetensors");
  CommandResult r = Sdrt("shard " + root + "/tiny.safetensors " + root +
                         "/ckpt --mesh 3x2 --plan " + root + "/PLAN.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  test::ExpectRoundTrip(root + "/ckpt", source);
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(root + "/ckpt");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(PlacementsToString(index->Find("model.layers.0.mlp.up_proj.weight")->placements),
            "[S(1), R]");
  EXPECT_EQ(PlacementsToString(index->Find("model.norm.weight")->placements), "[R, R]");
  EXPECT_EQ(PlacementsToString(index->Find("lm_head.weight")->placements), "[R, S(0)]");

  // A rule that does not fit a tensor: one line naming the file, the tensor and the rule.
  {
    std::ofstream plan(root + "/BAD.json");
    plan << R"({"rules": [{"pattern": "norm", "placements": "[S(1)]"}]})";
  }
  ExpectOneLineError(Sdrt("shard " + root + "/tiny.safetensors " + root + "/bad --mesh 2 --plan " +
                          root + "/BAD.json"),
                     2,
                     {root + "/tiny.safetensors", root + "/BAD.json", "rule 0 (\"norm\")",
                      "input_layernorm.weight", "no dim 1"});
  EXPECT_FALSE(fs::exists(root + "/bad"));
}

TEST(SdrtShard, BadInputExitsWithCode2AndOneLine) {
  const std::string root = test::FreshDir("shard_test_bad");
  ASSERT_EQ(Sdrt("make " + root + "/tiny.safetensors").exit_code, 0);
  const std::string src = root + "/tiny.safetensors";
  ExpectOneLineError(Sdrt("shard " + src + " " + root + "/o --mesh 4 --plan zero3"), 2,
                     {"unknown plan \"zero3\""});
  ExpectOneLineError(Sdrt("shard " + src + " " + root + "/o --mesh 4 --plan hsdp"), 2,
                     {"hsdp", "needs a 2-D mesh", "4"});
  ExpectOneLineError(Sdrt("shard " + src + " " + root + "/o --mesh 4 --plan fsdp-tp"), 2,
                     {"fsdp-tp", "2-D mesh"});
  ExpectOneLineError(Sdrt("shard " + src + " " + root + "/o --mesh 2xq --plan fsdp"), 2,
                     {"--mesh", "2xq"});
  ExpectOneLineError(
      Sdrt("shard " + src + " " + root + "/o --mesh 2x2 --mesh-dim-names a --plan fsdp"), 2,
      {"--mesh-dim-names"});
  ExpectOneLineError(
      Sdrt("shard " + root + "/missing.safetensors " + root + "/o --mesh 2 --plan fsdp"), 2,
      {root + "/missing.safetensors"});
  EXPECT_EQ(Sdrt("shard " + src + " " + root + "/o --plan fsdp").exit_code, 2);  // no --mesh
  EXPECT_FALSE(fs::exists(root + "/o"));

  // inspect on a broken folder names the file.
  ASSERT_EQ(Sdrt("shard " + src + " " + root + "/ckpt --mesh 2 --plan fsdp").exit_code, 0);
  fs::remove(root + "/ckpt/rank-00001-of-00002.safetensors");
  ExpectOneLineError(Sdrt("inspect " + root + "/ckpt"), 2,
                     {"rank-00001-of-00002.safetensors", "missing"});
  fs::create_directories(root + "/plain");
  ExpectOneLineError(Sdrt("inspect " + root + "/plain"), 2, {"index.json"});
}

TEST(SdrtShard, HelpForEveryCommand) {
  for (const char* command : {"shard", "make", "inspect"}) {
    CommandResult r = Sdrt(absl::StrCat(command, " --help"));
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_THAT(r.out, AllOf(HasSubstr("Usage"), HasSubstr("--json"))) << command;
  }
  EXPECT_THAT(Sdrt("shard --help").out, AllOf(HasSubstr("--mesh"), HasSubstr("--plan"),
                                              HasSubstr("fsdp-tp"), HasSubstr("--overwrite")));
  EXPECT_THAT(Sdrt("make --help").out, AllOf(HasSubstr("llama-8b"), HasSubstr("--scale")));
}

}  // namespace
}  // namespace sdrt
