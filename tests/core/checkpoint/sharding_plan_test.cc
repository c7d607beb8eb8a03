// The built-in sharding plans (fsdp, hsdp, tp, fsdp-tp) and PLAN.json files.
#include "sdrt/core/checkpoint/sharding_plan.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

DeviceMesh Mesh(const char* shape) { return *DeviceMesh::FromString(shape); }

std::string Placements(const ShardingPlan& plan, const std::string& name, IntVector shape,
                       const DeviceMesh& mesh) {
  absl::StatusOr<std::vector<Placement>> p = plan.PlacementsFor(name, shape, mesh);
  if (!p.ok()) return "error: " + std::string(p.status().message());
  return PlacementsToString(*p);
}

TEST(TpRole, LlamaBertAndGpt2Names) {
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.q_proj.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.kv_b_proj.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.q_a_proj.weight"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("decoder.layers.0.self_attention.linear_qkv.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"),
            TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("decoder.layers.0.mlp.linear_fc2.weight"), TpRole::kRow);
  EXPECT_EQ(TpRoleOf("output_layer.weight"), TpRole::kVocab);
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.k_proj.bias"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.v_proj.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.mlp.gate_proj.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.mlp.up_proj.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.o_proj.weight"), TpRole::kRow);
  EXPECT_EQ(TpRoleOf("model.layers.3.mlp.down_proj.weight"), TpRole::kRow);
  EXPECT_EQ(TpRoleOf("model.layers.3.input_layernorm.weight"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("model.norm.weight"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("model.embed_tokens.weight"), TpRole::kVocab);
  EXPECT_EQ(TpRoleOf("lm_head.weight"), TpRole::kVocab);
  // An FP8 weight's block scales are cut as it is; one scale per tensor is replicated.
  EXPECT_EQ(TpRoleOf("model.layers.3.self_attn.qkv_proj.weight_scale_inv"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("model.layers.3.mlp.down_proj.weight_scale_inv"), TpRole::kRow);
  EXPECT_EQ(TpRoleOf("model.layers.3.mlp.down_proj.weight_scale"), TpRole::kReplicate);

  EXPECT_EQ(TpRoleOf("encoder.layer.0.attention.self.query.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("bert.encoder.layer.0.attention.self.value.bias"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("encoder.layer.0.attention.output.dense.weight"), TpRole::kRow);
  EXPECT_EQ(TpRoleOf("encoder.layer.0.attention.output.LayerNorm.weight"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("encoder.layer.0.intermediate.dense.weight"), TpRole::kColumn);
  EXPECT_EQ(TpRoleOf("encoder.layer.0.output.dense.bias"), TpRole::kRow);
  EXPECT_EQ(TpRoleOf("embeddings.word_embeddings.weight"), TpRole::kVocab);
  EXPECT_EQ(TpRoleOf("embeddings.position_embeddings.weight"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("pooler.dense.weight"), TpRole::kReplicate);

  EXPECT_EQ(TpRoleOf("transformer.h.0.attn.c_attn.weight"), TpRole::kConv1DColumn);
  EXPECT_EQ(TpRoleOf("h.11.mlp.c_fc.bias"), TpRole::kConv1DColumn);
  EXPECT_EQ(TpRoleOf("h.0.attn.c_proj.weight"), TpRole::kConv1DRow);
  EXPECT_EQ(TpRoleOf("h.0.mlp.c_proj.bias"), TpRole::kConv1DRow);
  EXPECT_EQ(TpRoleOf("transformer.wte.weight"), TpRole::kVocab);
  EXPECT_EQ(TpRoleOf("wpe.weight"), TpRole::kReplicate);
  // Only whole components match.
  EXPECT_EQ(TpRoleOf("model.layers.0.self_attn.xq_proj.weight"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleOf("model.layers.0.self_attn.q_proj.weight_scale"), TpRole::kReplicate);
  EXPECT_EQ(TpRoleName(TpRole::kConv1DRow), "conv1d-row");
}

TEST(TpPlacement, WeightsBiasesAndScalars) {
  EXPECT_EQ(TpPlacement(TpRole::kColumn, 2), Placement::Shard(0));
  EXPECT_EQ(TpPlacement(TpRole::kColumn, 1), Placement::Shard(0));
  EXPECT_EQ(TpPlacement(TpRole::kRow, 2), Placement::Shard(1));
  EXPECT_EQ(TpPlacement(TpRole::kRow, 1), Placement::Replicate());
  EXPECT_EQ(TpPlacement(TpRole::kConv1DColumn, 2), Placement::Shard(1));
  EXPECT_EQ(TpPlacement(TpRole::kConv1DColumn, 1), Placement::Shard(0));
  EXPECT_EQ(TpPlacement(TpRole::kConv1DRow, 2), Placement::Shard(0));
  EXPECT_EQ(TpPlacement(TpRole::kConv1DRow, 1), Placement::Replicate());
  EXPECT_EQ(TpPlacement(TpRole::kVocab, 2), Placement::Shard(0));
  EXPECT_EQ(TpPlacement(TpRole::kColumn, 0), Placement::Replicate());
}

TEST(ShardingPlan, Fsdp) {
  const ShardingPlan plan = *ShardingPlan::Builtin("fsdp");
  EXPECT_EQ(plan.kind(), ShardingPlan::Kind::kFsdp);
  EXPECT_EQ(plan.name(), "fsdp");
  EXPECT_EQ(Placements(plan, "w", {8, 4}, Mesh("4")), "[S(0)]");
  EXPECT_EQ(Placements(plan, "b", {8}, Mesh("4")), "[S(0)]");
  EXPECT_EQ(Placements(plan, "w", {8, 4}, Mesh("2x2")), "[S(0), S(0)]");
  EXPECT_EQ(Placements(plan, "w", {8, 4}, Mesh("2x1x2")), "[S(0), S(0), S(0)]");
  EXPECT_EQ(Placements(plan, "step", {}, Mesh("2x2")), "[R, R]");
}

TEST(ShardingPlan, Hsdp) {
  const ShardingPlan plan = *ShardingPlan::Builtin("hsdp");
  EXPECT_EQ(Placements(plan, "w", {8, 4}, Mesh("2x2")), "[R, S(0)]");
  EXPECT_EQ(Placements(plan, "b", {3}, Mesh("3x2")), "[R, S(0)]");
  EXPECT_EQ(Placements(plan, "step", {}, Mesh("2x2")), "[R, R]");
}

TEST(ShardingPlan, TpOnOneAndTwoDimMeshes) {
  const ShardingPlan plan = *ShardingPlan::Builtin("tp");
  const DeviceMesh m4 = Mesh("4");
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.q_proj.weight", {8, 8}, m4), "[S(0)]");
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.o_proj.weight", {8, 8}, m4), "[S(1)]");
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.o_proj.bias", {8}, m4), "[R]");
  EXPECT_EQ(Placements(plan, "model.layers.0.input_layernorm.weight", {8}, m4), "[R]");
  EXPECT_EQ(Placements(plan, "h.0.attn.c_attn.weight", {8, 24}, m4), "[S(1)]");
  EXPECT_EQ(Placements(plan, "h.0.attn.c_attn.bias", {24}, m4), "[S(0)]");
  EXPECT_EQ(Placements(plan, "h.0.mlp.c_proj.weight", {32, 8}, m4), "[S(0)]");
  EXPECT_EQ(Placements(plan, "model.embed_tokens.weight", {100, 8}, m4), "[S(0)]");
  // N-D: the last mesh dim is TP, the others replicas.
  EXPECT_EQ(Placements(plan, "model.layers.0.mlp.down_proj.weight", {8, 16}, Mesh("2x2")),
            "[R, S(1)]");
  EXPECT_EQ(Placements(plan, "scale", {}, Mesh("2x2")), "[R, R]");
}

TEST(ShardingPlan, FsdpTpMirrorsFullyShardOverTp) {
  const ShardingPlan plan = *ShardingPlan::Builtin("fsdp-tp");
  const DeviceMesh m = Mesh("2x4");
  // TP Shard(0) and FSDP Shard(0) on the same dim: _StridedShard(0, tp size).
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.q_proj.weight", {64, 64}, m),
            "[_S(0, 4), S(0)]");
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.q_proj.bias", {64}, m), "[_S(0, 4), S(0)]");
  EXPECT_EQ(Placements(plan, "model.embed_tokens.weight", {100, 8}, m), "[_S(0, 4), S(0)]");
  // TP on another dim or replicated: plain Shard(0).
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.o_proj.weight", {64, 64}, m),
            "[S(0), S(1)]");
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.o_proj.bias", {64}, m), "[S(0), R]");
  EXPECT_EQ(Placements(plan, "model.norm.weight", {64}, m), "[S(0), R]");
  EXPECT_EQ(Placements(plan, "h.0.attn.c_attn.weight", {8, 24}, m), "[S(0), S(1)]");
  EXPECT_EQ(Placements(plan, "h.0.attn.c_proj.weight", {8, 8}, m), "[_S(0, 4), S(0)]");
  EXPECT_EQ(Placements(plan, "step", {}, m), "[R, R]");
  // A tp dim of size 1: split factor 1 is plain Shard(0), as PyTorch writes it.
  EXPECT_EQ(Placements(plan, "model.layers.0.self_attn.q_proj.weight", {64, 64}, Mesh("4x1")),
            "[S(0), S(0)]");
}

TEST(ShardingPlan, TwoDimPlansRefuseOtherMeshes) {
  for (const char* name : {"hsdp", "fsdp-tp"}) {
    const ShardingPlan plan = *ShardingPlan::Builtin(name);
    for (const char* mesh : {"4", "2x2x2"}) {
      absl::Status s = plan.CheckMesh(Mesh(mesh));
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " " << mesh;
      EXPECT_THAT(s.message(),
                  AllOf(HasSubstr(name), HasSubstr("needs a 2-D mesh"), HasSubstr(mesh)));
      s = plan.PlacementsFor("w", {4}, Mesh(mesh)).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " " << mesh;
      EXPECT_THAT(s.message(),
                  AllOf(HasSubstr(name), HasSubstr("needs a 2-D mesh"), HasSubstr(mesh)));
    }
  }
}

TEST(ShardingPlan, UnknownPlan) {
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::Builtin("zero3");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), AllOf(HasSubstr("zero3"), HasSubstr("fsdp-tp")));
  plan = ShardingPlan::FromSpec("fsdpx");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("unknown plan \"fsdpx\""));
  plan = ShardingPlan::FromSpec("/nonexistent/plan.json");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(plan.status().message(), HasSubstr("cannot be read: No such file or directory"));
  EXPECT_THAT(plan.status().message(), HasSubstr("/nonexistent/plan.json"));
}

TEST(ShardingPlan, JsonRulesFirstMatchWins) {
  const std::string text = R"json({
    "rules": [
      {"pattern": "\\.(q|k|v)_proj\\.weight$", "placements": "[R, S(0)]"},
      {"pattern": "proj", "placements": ["S(1)", "R"]},
      {"pattern": "^cube$", "placements": "_S(2, 2), S(0)"}
    ],
    "default": "[S(0), R]",
    "mesh_ndim": 2
  })json";
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromJson(text, "PLAN.json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kind(), ShardingPlan::Kind::kCustom);
  EXPECT_EQ(plan->name(), "PLAN.json");
  const DeviceMesh m = Mesh("2x2");
  EXPECT_EQ(Placements(*plan, "layers.0.q_proj.weight", {4, 4}, m), "[R, S(0)]");
  EXPECT_EQ(Placements(*plan, "layers.0.o_proj.weight", {4, 4}, m), "[S(1), R]");
  EXPECT_EQ(Placements(*plan, "cube", {4, 4, 4}, m), "[_S(2, 2), S(0)]");
  EXPECT_EQ(Placements(*plan, "norm", {4}, m), "[S(0), R]");
  EXPECT_EQ(Placements(*plan, "scalar", {}, m), "[R, R]");
  // A rule that shards a dim the tensor lacks names the rule and the tensor.
  const std::string bad = Placements(*plan, "layers.0.o_proj.bias", {4}, m);
  EXPECT_THAT(bad, AllOf(HasSubstr("rule 1 (\"proj\")"), HasSubstr("layers.0.o_proj.bias"),
                         HasSubstr("no dim 1")));
  EXPECT_THAT(Placements(*plan, "w", {4}, Mesh("4")), HasSubstr("2-D mesh"));
}

TEST(ShardingPlan, JsonObjectFormAndDefaultReplicate) {
  absl::StatusOr<ShardingPlan> plan =
      ShardingPlan::FromJson(R"({"rules": {"weight$": "[S(0)]", ".*": "[S(0)]"}})", "p.json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Placements(*plan, "a.weight", {4, 2}, Mesh("4")), "[S(0)]");
  plan = ShardingPlan::FromJson(R"({"mesh_ndim": 1})", "p.json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Placements(*plan, "a.weight", {4, 2}, Mesh("4")), "[R]");
}

// The rules' hash (what an engine's layout records): the same rules whatever the spacing,
// comments and file name; any other rule, placement or default differs; 0 for built-ins.
TEST(ShardingPlan, RulesHashIsTheRulesNotTheirSpellingOrFile) {
  const auto hash = [](const std::string& text, const std::string& file = "p.json") {
    absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromJson(text, file);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->rules_xxh64() : 0;
  };
  const uint64_t base =
      hash(R"({"rules": [{"pattern": "w$", "placements": "[S(0)]"}], "default": "[R]"})");
  EXPECT_NE(base, 0u);
  EXPECT_EQ(hash("{\"comment\": \"x\",\n \"rules\": [{\"pattern\": \"w$\", \"comment\": \"y\",\n"
                 "  \"placements\": \"[S(0)]\"}],\n \"default\": \"[R]\"}",
                 "/other/q.json"),
            base);
  EXPECT_NE(hash(R"({"rules": [{"pattern": "w$", "placements": "[S(1)]"}], "default": "[R]"})"),
            base);
  EXPECT_NE(hash(R"({"rules": [{"pattern": "v$", "placements": "[S(0)]"}], "default": "[R]"})"),
            base);
  EXPECT_NE(hash(R"({"rules": [{"pattern": "w$", "placements": "[S(0)]"}]})"), base);
  EXPECT_EQ(ShardingPlan::Builtin("tp")->rules_xxh64(), 0u);
}

TEST(ShardingPlan, JsonErrorsNameTheFileAndRule) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"{", "not valid JSON"},
      {"[]", "top level must be an object"},
      {R"({"rulez": []})", "unknown field \"rulez\""},
      {R"({"rules": [{"pattern": "a", "placements": "[S(0)]", "placement": "[R]"}]})",
       "rule 0: unknown field \"placement\""},
      {R"({"rules": [{"pattern": "(", "placements": "[S(0)]"}]})",
       "rule 0 (\"(\"): bad pattern (RE2 syntax): missing )"},
      {R"({"rules": [{"pattern": "a", "placements": "[Q(0)]"}]})", "rule 0 (\"a\")"},
      {R"({"rules": [{"pattern": "a", "placements": "[P(sum)]"}]})", "not allowed"},
      {R"({"rules": [{"pattern": "a", "placements": 3}]})", "placements must be"},
      {R"({"rules": [{"pattern": "a"}]})", "rule 0 must be an object"},
      {R"({"rules": [{"pattern": "a", "placements": "[S(0)]"},
                     {"pattern": "b", "placements": "[S(0), R]"}]})",
       "rule 1 (\"b\") has 2 placements but rule 0 (\"a\") has 1"},
      {R"({"default": "[R]", "mesh_ndim": 2})", "default has 1 placements but mesh_ndim has 2"},
      {R"({"default": "[]"})", "empty placement list"},
      {R"({})", "says nothing about the mesh"},
      {R"({"rules": 5})", "\"rules\" must be"},
      // Issue 12: duplicate keys were accepted last-wins.
      {R"({"default": "[R]", "default": "[S(0)]"})", "duplicate key \"default\" in one object"},
      {R"({"rules": {"norm": "[R]", "norm": "[S(0)]"}})", "duplicate key \"norm\""},
  };
  const std::string deep = R"({"comment": )" + std::string(100, '[') + std::string(100, ']') + "}";
  absl::StatusOr<ShardingPlan> too_deep = ShardingPlan::FromJson(deep, "my/PLAN.json");
  EXPECT_EQ(too_deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_deep.status().message(), HasSubstr("nested deeper than 64 levels"));
  for (const Case& c : cases) {
    absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromJson(c.text, "my/PLAN.json");
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(plan.status().message(), AllOf(HasSubstr("my/PLAN.json"), HasSubstr(c.message)))
        << c.text;
  }
}

// Findings 6 and 7 of issue 12: std::regex backtracked exponentially on ^(a+)+$ and
// overflowed the stack on a 50,000-character name; RE2 is linear and does not recurse.
TEST(ShardingPlan, JsonPatternsAreLinearTimeSearches) {
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromJson(
      R"({"rules": [{"pattern": "^(a+)+$", "placements": "[S(0)]"},
                    {"pattern": "layers\\..*\\.weight$", "placements": "[S(1)]"},
                    {"pattern": "norm", "placements": "[R]"}],
          "default": "[S(0)]"})",
      "PLAN.json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const DeviceMesh m = Mesh("2");
  EXPECT_EQ(Placements(*plan, std::string(31, 'a'), {4, 4}, m), "[S(0)]");
  EXPECT_EQ(Placements(*plan, std::string(4000, 'a') + "b", {4, 4}, m), "[S(0)]");
  const std::string long_name = "layers." + std::string(50000, 'x') + ".weight";
  EXPECT_EQ(Placements(*plan, long_name, {4, 4}, m), "[S(1)]");
  // A search, as before: "norm" matches anywhere in the name, unanchored.
  EXPECT_EQ(Placements(*plan, "model.norm.weight", {4}, m), "[R]");
  // RE2 has no backreferences: the error names the rule, the pattern and RE2's reason.
  absl::StatusOr<ShardingPlan> bad = ShardingPlan::FromJson(
      R"({"rules": [{"pattern": "(a)\\1", "placements": "[S(0)]"}]})", "PLAN.json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              AllOf(HasSubstr("rule 0 (\"(a)\\1\")"), HasSubstr("RE2 syntax"),
                    HasSubstr("invalid escape sequence")));
}

TEST(ShardingPlan, FromSpecReadsAFile) {
  const std::string path =
      (std::filesystem::path(test::TestTmpRoot()) / "sharding_plan_test.json").string();
  {
    std::ofstream out(path);
    out << R"({"rules": [{"pattern": "norm", "placements": "[R]"}], "default": "[S(0)]"})";
  }
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromSpec(path);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->name(), path);
  EXPECT_EQ(Placements(*plan, "model.norm.weight", {4}, Mesh("3")), "[R]");
  EXPECT_EQ(Placements(*plan, "w", {4}, Mesh("3")), "[S(0)]");
  const absl::Status two_dim = plan->CheckMesh(Mesh("2x2"));
  EXPECT_EQ(two_dim.code(), absl::StatusCode::kInvalidArgument) << two_dim;
  EXPECT_THAT(two_dim.message(), AllOf(HasSubstr(path), HasSubstr("1-D")));
}

// Rank `rank`'s MetaStateDict entry `name`: "<local shape> <placements>", or the error.
std::string MetaEntry(const ShardingPlan& plan, const std::vector<SafetensorsTensorSpec>& tensors,
                      const char* mesh, int64_t rank, const std::string& name) {
  absl::StatusOr<Map> local =
      plan.MetaStateDict(tensors, std::make_shared<const DeviceMesh>(Mesh(mesh)), rank);
  if (!local.ok()) return "error: " + std::string(local.status().message());
  const Value* v = local->Find(name);
  if (v == nullptr || v->kind() != ValueKind::kDTensor) return "no DTensor";
  const DTensor& d = v->as_dtensor();
  EXPECT_TRUE(d.local().is_meta());
  EXPECT_EQ(d.global_shape(), IntVector(tensors[0].shape));
  return ShapeToString(d.local().shape()) + " " + PlacementsToString(d.placements());
}

// Uneven and empty pieces as torch.chunk cuts them: 10 rows over 4 ranks are 3, 3, 3, 1;
// 2 rows over 4 ranks are 1, 1, 0, 0.
TEST(MetaStateDict, LocalShapesOfUnevenAndEmptyPieces) {
  const ShardingPlan fsdp = *ShardingPlan::Builtin("fsdp");
  const std::vector<SafetensorsTensorSpec> ten = {{"w", DType::kBFloat16, {10, 6}}};
  const std::vector<SafetensorsTensorSpec> two = {{"w", DType::kBFloat16, {2, 6}}};
  const char* const want_ten[] = {"[3, 6] [S(0)]", "[3, 6] [S(0)]", "[3, 6] [S(0)]",
                                  "[1, 6] [S(0)]"};
  const char* const want_two[] = {"[1, 6] [S(0)]", "[1, 6] [S(0)]", "[0, 6] [S(0)]",
                                  "[0, 6] [S(0)]"};
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(MetaEntry(fsdp, ten, "4", r, "w"), want_ten[r]) << "rank " << r;
    EXPECT_EQ(MetaEntry(fsdp, two, "4", r, "w"), want_two[r]) << "rank " << r;
  }
}

// A 2-D mesh: fsdp-tp gives q_proj [_S(0, 2), S(0)] (rank (d, t) holds the d-th dp chunk
// of the t-th tp chunk: 10 rows -> tp chunks of 5 -> dp chunks of 3 and 2) and o_proj
// [S(0), S(1)]; every tensor of the list is there, in order, with its dtype.
TEST(MetaStateDict, TwoDimMeshAndEveryTensorInOrder) {
  const ShardingPlan plan = *ShardingPlan::Builtin("fsdp-tp");
  const std::vector<SafetensorsTensorSpec> tensors = {
      {"layers.0.self_attn.q_proj.weight", DType::kFloat32, {10, 4}},
      {"layers.0.self_attn.o_proj.weight", DType::kFloat16, {4, 10}},
      {"norm.weight", DType::kFloat32, {4}},
      {"step", DType::kInt64, {}}};
  const char* const q[] = {"[3, 4] [_S(0, 2), S(0)]", "[3, 4] [_S(0, 2), S(0)]",
                           "[2, 4] [_S(0, 2), S(0)]", "[2, 4] [_S(0, 2), S(0)]"};
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(MetaEntry(plan, tensors, "2x2", r, tensors[0].name), q[r]) << "rank " << r;
  }
  absl::StatusOr<Map> local =
      plan.MetaStateDict(tensors, std::make_shared<const DeviceMesh>(Mesh("2x2")), 3);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(local->size(), 4u);
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(local->key(i), tensors[i].name);
    EXPECT_EQ(local->value(i).as_dtensor().dtype(), tensors[i].dtype);
  }
  const DTensor& o = local->value(1).as_dtensor();
  EXPECT_EQ(o.local().shape(), IntVector({2, 5}));
  EXPECT_EQ(o.global_stride(), IntVector({10, 1}));
  EXPECT_EQ(PlacementsToString(o.placements()), "[S(0), S(1)]");
  // A 0-dim tensor is whole on every rank.
  EXPECT_TRUE(local->value(3).as_dtensor().local().shape().empty());
  EXPECT_EQ(PlacementsToString(local->value(3).as_dtensor().placements()), "[R, R]");
}

// A rank outside the mesh holds nothing of the layout: an empty map (PyTorch's (0,) local
// cannot be a DTensor local of another rank).
TEST(MetaStateDict, RankOutsideTheMeshGetsAnEmptyMap) {
  const ShardingPlan fsdp = *ShardingPlan::Builtin("fsdp");
  const std::vector<SafetensorsTensorSpec> tensors = {{"w", DType::kFloat32, {10, 6}}};
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2}, {4, 5}));
  for (int64_t rank : {0, 3, 6, -1}) {
    absl::StatusOr<Map> local = fsdp.MetaStateDict(tensors, mesh, rank);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_TRUE(local->empty()) << "rank " << rank;
  }
  // Ranks 4 and 5 are the mesh's: rows 0-4 and 5-9.
  absl::StatusOr<Map> five = fsdp.MetaStateDict(tensors, mesh, 5);
  ASSERT_TRUE(five.ok()) << five.status();
  EXPECT_EQ(five->Find("w")->as_dtensor().local().shape(), IntVector({5, 6}));
}

TEST(MetaStateDict, Errors) {
  const std::vector<SafetensorsTensorSpec> tensors = {{"w", DType::kFloat32, {4}},
                                                      {"w", DType::kFloat32, {4}}};
  absl::StatusOr<Map> twice = ShardingPlan::Builtin("fsdp")->MetaStateDict(
      tensors, std::make_shared<const DeviceMesh>(Mesh("2")), 0);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.status().message(), HasSubstr("tensor w is listed twice"));
  // hsdp needs a 2-D mesh: the plan's error.
  absl::StatusOr<Map> hsdp = ShardingPlan::Builtin("hsdp")->MetaStateDict(
      {tensors[0]}, std::make_shared<const DeviceMesh>(Mesh("2")), 0);
  EXPECT_EQ(hsdp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hsdp.status().message(), HasSubstr("hsdp"));
  EXPECT_EQ(ShardingPlan::Builtin("fsdp")->MetaStateDict({tensors[0]}, nullptr, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A negative dim: ComputeLocalShape's error, naming the tensor.
  absl::StatusOr<Map> negative = ShardingPlan::Builtin("fsdp")->MetaStateDict(
      {{"neg", DType::kFloat32, {-3}}}, std::make_shared<const DeviceMesh>(Mesh("2")), 0);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("neg"));
}

}  // namespace
}  // namespace sdrt
