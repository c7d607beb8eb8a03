// `sdrt gather`, `sdrt load` and `sdrt demo` run as the built binary under mpiexec (this test
// is one process; it starts `mpiexec -n N sdrt ...` itself): shard -> gather -> load round
// trips on synthetic checkpoints for 1-4 ranks (3: uneven and empty shards) and on the real
// all-MiniLM-L6-v2 for 2 and 4 ranks, every gathered file compared with its source tensor by
// tensor; the JSON each command prints; errors (one line, exit code 2 on every rank for bad
// input, no output file replaced or left half written).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/minilm.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

using test::CommandResult;

std::string Quote(const std::string& s) { return test::ShellQuote(s); }

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CommandResult Shell(const std::string& command) { return test::RunCommand(command); }

// `sdrt ARGS` (one process).
CommandResult Sdrt(const std::string& args) { return Shell(Quote(SDRT_BINARY) + " " + args); }

std::string MpiexecPrefix(int ranks) {
  return absl::StrCat(Quote(SDRT_MPIEXEC), " ", SDRT_MPIEXEC_NUMPROC_FLAG, " ", ranks, " ");
}

// `mpiexec -n RANKS sdrt ARGS`, with the environment assignments `env` ("A=1 B=2 ").
CommandResult Mpi(int ranks, const std::string& args, const std::string& env = "") {
  return Shell(env + MpiexecPrefix(ranks) + Quote(SDRT_BINARY) + " " + args);
}

// As Mpi, also returning each rank's own exit code (each rank runs under a shell that
// records it in `rc_dir`/rc.<PMI_RANK>); -1 for a rank that recorded nothing.
CommandResult MpiPerRank(int ranks, const std::string& args, const std::string& rc_dir,
                         std::vector<int>* rank_codes) {
  fs::remove_all(rc_dir);
  fs::create_directories(rc_dir);
  const std::string script =
      absl::StrCat("\"$0\" \"$@\"; rc=$?; echo $rc > ", Quote(rc_dir), "/rc.$PMI_RANK; exit $rc");
  CommandResult r = Shell(MpiexecPrefix(ranks) + "sh -c " + Quote(script) + " " +
                          Quote(SDRT_BINARY) + " " + args);
  rank_codes->assign(static_cast<size_t>(ranks), -1);
  for (int q = 0; q < ranks; ++q) {
    const std::string text = ReadBytes(absl::StrCat(rc_dir, "/rc.", q));
    if (!text.empty()) (*rank_codes)[q] = std::stoi(text);
  }
  return r;
}

nlohmann::json ParseJson(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// One line on stderr naming every part, nothing on stdout, exit code `code`.
void ExpectOneLineError(const CommandResult& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, code) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line:\n" << r.err;
  for (const std::string& p : parts) EXPECT_THAT(r.err, HasSubstr(p));
}

// The files in `dir` (names only), sorted.
std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// `out` holds exactly the tensors of `source`: the same names in the same (byte) order, each
// with the same dtype, shape and bytes, and the same __metadata__.
void ExpectSameTensors(const std::string& source_path, const std::string& out_path) {
  absl::StatusOr<SafetensorsFile> a = SafetensorsFile::Open(source_path);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<SafetensorsFile> b = SafetensorsFile::Open(out_path);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->metadata(), a->metadata()) << out_path << ": __metadata__";
  std::vector<std::string> names_a, names_b;
  for (const SafetensorsEntry& e : a->entries()) names_a.push_back(e.name);
  for (const SafetensorsEntry& e : b->entries()) names_b.push_back(e.name);
  EXPECT_EQ(names_b, names_a) << out_path << ": tensor names in byte order (entries())";
  const auto* base_a = static_cast<const unsigned char*>(a->storage()->data()) + a->data_offset();
  const auto* base_b = static_cast<const unsigned char*>(b->storage()->data()) + b->data_offset();
  for (const SafetensorsEntry& x : a->entries()) {
    const SafetensorsEntry* y = b->Find(x.name);
    if (y == nullptr) {
      ADD_FAILURE() << out_path << ": tensor " << x.name << " is missing";
      continue;
    }
    EXPECT_EQ(DTypeName(y->dtype), DTypeName(x.dtype)) << x.name;
    EXPECT_EQ(y->shape, x.shape) << x.name;
    const int64_t n = x.data_end - x.data_begin;
    if (y->data_end - y->data_begin != n) {
      ADD_FAILURE() << x.name << ": " << (y->data_end - y->data_begin) << " bytes, source " << n;
      continue;
    }
    const unsigned char* p = base_a + x.data_begin;
    const unsigned char* q = base_b + y->data_begin;
    const auto diff = std::mismatch(p, p + n, q);
    EXPECT_EQ(diff.first, p + n) << x.name << ": first differing byte at " << (diff.first - p)
                                 << " of " << n;
  }
}

int64_t TotalBytes(const std::string& path) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  int64_t total = 0;
  if (f.ok()) {
    for (const SafetensorsEntry& e : f->entries()) total += e.data_end - e.data_begin;
  }
  return total;
}

// The keys every gather --json prints, with their values checked against the run.
void ExpectGatherJson(const nlohmann::json& j, int ranks, const std::string& source) {
  ASSERT_TRUE(j.is_object()) << j;
  for (const char* key :
       {"command", "in_dir", "out", "ranks", "device", "tensors", "bytes", "gather_seconds",
        "gather_gbps", "write_seconds", "collectives", "exchanges", "buffer_bytes", "verified",
        "peak_rss_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << "gather --json lacks \"" << key << "\": " << j;
  }
  EXPECT_EQ(j.value("command", ""), "gather");
  EXPECT_EQ(j.value("ranks", -1), ranks);
  EXPECT_EQ(j.value("bytes", int64_t{-1}), TotalBytes(source));
  EXPECT_EQ(j.value("tensors", size_t{0}), SafetensorsFile::Open(source)->entries().size());
  EXPECT_GE(j.value("gather_seconds", -1.0), 0.0);
  EXPECT_GE(j.value("gather_gbps", -1.0), 0.0);
  EXPECT_TRUE(j.value("verified", false));
  // docs/ARCHITECTURE.md: the agreement, the exchanges and the closing for a gather (no
  // ShardedTensor, no Partial); on one rank nothing is sharded, so nothing moves and the
  // agreement is all.
  const int64_t exchanges = j.value("exchanges", int64_t{-1});
  EXPECT_GE(exchanges, ranks > 1 ? 1 : 0);
  EXPECT_EQ(j.value("collectives", int64_t{-1}), exchanges > 0 ? 2 + exchanges : 1) << j;
  // No buffer when nothing moved; else at most three buckets' worth (two send buckets and the
  // receive bucket) of the tensors' bytes.
  const int64_t buffers = j.value("buffer_bytes", int64_t{-1});
  if (exchanges == 0) {
    EXPECT_EQ(buffers, 0) << j;
  } else {
    EXPECT_GE(buffers, 0) << j;
    EXPECT_LE(buffers, 3 * j.value("bytes", int64_t{0})) << j;
  }
  ASSERT_TRUE(j["peak_rss_bytes"].is_array()) << j;
  ASSERT_EQ(j["peak_rss_bytes"].size(), static_cast<size_t>(ranks));
  for (const nlohmann::json& p : j["peak_rss_bytes"]) EXPECT_GT(p.get<int64_t>(), 0);
}

void ExpectLoadJson(const nlohmann::json& j, int ranks, const std::string& source,
                    const std::string& plan, const std::string& mesh,
                    const std::string& verified_against) {
  ASSERT_TRUE(j.is_object()) << j;
  for (const char* key : {"command",
                          "file",
                          "mesh",
                          "plan",
                          "ranks",
                          "device",
                          "tensors",
                          "bytes",
                          "seconds",
                          "gbps",
                          "collectives",
                          "exchanges",
                          "verified_against",
                          "mismatches",
                          "bit_exact",
                          "read",
                          "read_reason",
                          "bytes_read",
                          "bytes_kept",
                          "read_amplification",
                          "peak_rss_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << "load --json lacks \"" << key << "\": " << j;
  }
  EXPECT_EQ(j.value("command", ""), "load");
  EXPECT_EQ(j.value("ranks", -1), ranks);
  EXPECT_EQ(j.value("plan", ""), plan);
  EXPECT_EQ(j.value("mesh", ""), mesh);
  EXPECT_EQ(j.value("bytes", int64_t{-1}), TotalBytes(source));
  EXPECT_GE(j.value("seconds", -1.0), 0.0);
  EXPECT_GE(j.value("gbps", -1.0), 0.0);
  EXPECT_EQ(j.value("verified_against", ""), verified_against);
  EXPECT_TRUE(j.value("bit_exact", false)) << j;
  EXPECT_EQ(j["mismatches"], nlohmann::json::array()) << j;
  // docs/ARCHITECTURE.md: for --read root, the broadcast's two agreements, its exchanges
  // and its closing; with --read all nothing moves between ranks and each rank reads at most
  // 1/32 more than it keeps.
  if (j.value("read", "") == "root") {
    EXPECT_GE(j.value("exchanges", int64_t{0}), 1);
    EXPECT_EQ(j.value("collectives", int64_t{-1}), 3 + j.value("exchanges", int64_t{0})) << j;
  } else {
    EXPECT_EQ(j.value("read", ""), "all") << j;
    ASSERT_EQ(j["read_amplification"].size(), static_cast<size_t>(ranks));
    for (const nlohmann::json& a : j["read_amplification"])
      EXPECT_LE(a.get<double>(), 1.0 + 1.0 / 32);
  }
  ASSERT_TRUE(j["peak_rss_bytes"].is_array()) << j;
  ASSERT_EQ(j["peak_rss_bytes"].size(), static_cast<size_t>(ranks));
  for (const nlohmann::json& p : j["peak_rss_bytes"]) EXPECT_GT(p.get<int64_t>(), 0);
}

struct Config {
  int ranks;
  const char* plan;
  const char* mesh;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << c.plan << " on mesh " << c.mesh << ", " << c.ranks << " ranks";
}

std::string ConfigName(const Config& c) {
  std::string mesh = c.mesh;
  std::replace(mesh.begin(), mesh.end(), 'x', '_');
  std::string plan = c.plan;
  std::replace(plan.begin(), plan.end(), '-', '_');
  return absl::StrCat("np", c.ranks, "_", plan, "_mesh", mesh);
}

// shard -> gather (compared tensor by tensor) -> load --verify and load (slicing FILE), all
// with --json; `bucket_mib` 0 keeps the default; `env` goes before every mpiexec.
void RoundTrip(const std::string& source, const std::string& root, const Config& c,
               int bucket_mib = 0, const std::string& env = "") {
  SCOPED_TRACE(absl::StrCat(source, ": ", c.plan, " on mesh ", c.mesh, ", ", c.ranks, " ranks"));
  const std::string bucket = bucket_mib > 0 ? absl::StrCat(" --bucket-mib ", bucket_mib) : "";
  const std::string dir = root + "/ckpt";
  CommandResult shard = Sdrt(absl::StrCat("shard ", Quote(source), " ", Quote(dir), " --mesh ",
                                          c.mesh, " --plan ", c.plan));
  ASSERT_EQ(shard.exit_code, 0) << shard.err;

  const std::string out = root + "/gathered.safetensors";
  CommandResult gather =
      Mpi(c.ranks, absl::StrCat("gather ", Quote(dir), " ", Quote(out), bucket, " --json"), env);
  ASSERT_EQ(gather.exit_code, 0) << gather.out << gather.err;
  EXPECT_TRUE(gather.err.empty()) << gather.err;
  const nlohmann::json g = ParseJson(gather.out);  // rank 0 alone prints: one document
  ASSERT_FALSE(g.is_discarded()) << gather.out;
  ExpectGatherJson(g, c.ranks, source);
  ExpectSameTensors(source, out);
  // Written atomically: nothing but the file (no temporary left beside it).
  EXPECT_EQ(ListDir(root), (std::vector<std::string>{"ckpt", "gathered.safetensors"}));

  CommandResult verify = Mpi(c.ranks,
                             absl::StrCat("load ", Quote(source), " --mesh ", c.mesh, " --plan ",
                                          c.plan, " --verify ", Quote(dir), bucket, " --json"),
                             env);
  ASSERT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_TRUE(verify.err.empty()) << verify.err;
  const nlohmann::json v = ParseJson(verify.out);
  ASSERT_FALSE(v.is_discarded()) << verify.out;
  ExpectLoadJson(v, c.ranks, source, c.plan, c.mesh, dir);

  CommandResult sliced = Mpi(c.ranks,
                             absl::StrCat("load ", Quote(source), " --mesh ", c.mesh, " --plan ",
                                          c.plan, bucket, " --json"),
                             env);
  ASSERT_EQ(sliced.exit_code, 0) << sliced.out << sliced.err;
  const nlohmann::json s = ParseJson(sliced.out);
  ASSERT_FALSE(s.is_discarded()) << sliced.out;
  ExpectLoadJson(s, c.ranks, source, c.plan, c.mesh, source);
}

// ---------------------------------------------------------------------------------------
// Synthetic checkpoints: tiny-llama in bf16 and f32, for 1-4 ranks.

struct SyntheticCase {
  const char* dtype;
  Config config;
};

void PrintTo(const SyntheticCase& c, std::ostream* os) {
  *os << c.dtype << ", ";
  PrintTo(c.config, os);
}

class SyntheticRoundTrip : public ::testing::TestWithParam<SyntheticCase> {};

TEST_P(SyntheticRoundTrip, ShardGatherLoad) {
  const SyntheticCase& p = GetParam();
  // Each test makes its own source: CTest runs every test in its own process, in parallel.
  const std::string root = test::FreshDir(
      absl::StrCat("distributed_cli_synthetic_", p.dtype, "_", ConfigName(p.config)));
  const std::string source = root + "/tiny-llama.safetensors";
  CommandResult made =
      Sdrt(absl::StrCat("make --arch tiny-llama --seed 5 --dtype ", p.dtype, " ", Quote(source)));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string work = root + "/work";
  fs::create_directories(work);
  RoundTrip(source, work, p.config);
  if (!HasFailure()) fs::remove_all(root);
}

std::vector<SyntheticCase> SyntheticCases() {
  std::vector<SyntheticCase> cases;
  for (const char* dtype : {"bf16", "f32"}) {
    for (const Config& c :
         {Config{1, "fsdp", "1"}, Config{1, "tp", "1"}, Config{2, "fsdp", "2"},
          Config{2, "tp", "2"}, Config{2, "fsdp-tp", "1x2"}, Config{2, "fsdp-tp", "2x1"},
          Config{3, "fsdp", "3"}, Config{3, "tp", "3"}, Config{3, "hsdp", "1x3"},
          Config{4, "fsdp", "4"}, Config{4, "tp", "4"}, Config{4, "hsdp", "2x2"},
          Config{4, "fsdp-tp", "2x2"}}) {
      cases.push_back({dtype, c});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(TinyLlama, SyntheticRoundTrip, ::testing::ValuesIn(SyntheticCases()),
                         [](const ::testing::TestParamInfo<SyntheticCase>& info) {
                           return absl::StrCat(info.param.dtype, "_",
                                               ConfigName(info.param.config));
                         });

// Mixed dtypes (bool, int8, f16, bf16, f32, f64, int32, int64), a 0-dim tensor, a
// zero-element tensor, dims smaller than the mesh (empty shards) and uneven dims.
TEST(DistributedCli, MixedStateDictRoundTrips) {
  const std::string root = test::FreshDir("distributed_cli_mixed");
  const std::string source = root + "/mixed.safetensors";
  test::WriteSource(source, test::MixedStateDict());
  for (const Config& c : {Config{3, "fsdp", "3"}, Config{3, "tp", "3"}, Config{4, "tp", "4"},
                          Config{4, "fsdp-tp", "2x2"}}) {
    const std::string work = test::FreshDir("distributed_cli_mixed_" + ConfigName(c));
    RoundTrip(source, work, c);
    if (!HasFailure()) fs::remove_all(work);
  }
}

// A valid file whose bytes are not sorted by element size (f32, then bf16, then i64): the
// gathered file keeps its tensor order too (`sdrt gather` writes with
// WriteSafetensorsOptions::data_in_given_order; by default sdrt sorts by element size).
TEST(DistributedCli, SourceByteOrderIsKept) {
  const std::string root = test::FreshDir("distributed_cli_order");
  const std::string source = root + "/unsorted.safetensors";
  {
    std::string header =
        R"({"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
        R"("model.layers.0.mlp.up_proj.weight":{"dtype":"BF16","shape":[4,2],)"
        R"("data_offsets":[16,32]},)"
        R"("position_ids":{"dtype":"I64","shape":[1,4],"data_offsets":[32,64]},)"
        R"("__metadata__":{"format":"pt"}})";
    while (header.size() % 8 != 0) header.push_back(' ');
    std::string file(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(file.data(), &n, 8);  // little-endian host
    file += header;
    for (int i = 0; i < 64; ++i) file.push_back(static_cast<char>(i * 37 + 11));
    std::ofstream(source, std::ios::binary) << file;
  }
  absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(source);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_EQ(opened->entries()[0].name, "model.norm.weight");
  const std::string work = test::FreshDir("distributed_cli_order_work");
  RoundTrip(source, work, Config{2, "fsdp", "2"});
}

// ---------------------------------------------------------------------------------------
// all-MiniLM-L6-v2 (the minilm fixture, tests/support/minilm.h).

class MiniLMRoundTrip : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    SDRT_MINILM_OR_SKIP(path);
    path_ = path;
  }

  std::string path_;
};

TEST_P(MiniLMRoundTrip, ShardGatherLoad) {
  const Config& c = GetParam();
  const std::string root = test::FreshDir("distributed_cli_minilm_" + ConfigName(c));
  // 16 MiB buckets: several gather buckets and a pipelined broadcast for the 90 MB file.
  RoundTrip(path_, root, c, /*bucket_mib=*/16);
  fs::remove_all(root);  // about 270 MB
}

INSTANTIATE_TEST_SUITE_P(AllMiniLML6V2, MiniLMRoundTrip,
                         ::testing::Values(Config{2, "fsdp", "2"}, Config{2, "tp", "2"},
                                           Config{2, "fsdp-tp", "1x2"}, Config{2, "fsdp-tp", "2x1"},
                                           Config{4, "fsdp", "4"}, Config{4, "tp", "4"},
                                           Config{4, "fsdp-tp", "2x2"}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return ConfigName(info.param);
                         });

// ---------------------------------------------------------------------------------------
// Text output, the demo.

TEST(DistributedCli, TextOutputOfGatherAndLoad) {
  const std::string root = test::FreshDir("distributed_cli_text");
  const std::string source = root + "/tiny.safetensors";
  ASSERT_EQ(Sdrt("make --dtype f32 " + Quote(source)).exit_code, 0);
  ASSERT_EQ(
      Sdrt("shard " + Quote(source) + " " + Quote(root + "/ckpt") + " --mesh 2x2 --plan fsdp-tp")
          .exit_code,
      0);
  CommandResult g = Mpi(4, "gather " + Quote(root + "/ckpt") + " " + Quote(root + "/out.st"));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_THAT(g.out,
              AllOf(HasSubstr("gathered 21 tensors"), HasSubstr("from 4 ranks"), HasSubstr("GB/s"),
                    HasSubstr("collectives"), HasSubstr("peak memory per rank")));
  EXPECT_EQ(std::count(g.out.begin(), g.out.end(), '\n'), 4) << "rank 0 alone prints:\n" << g.out;
  ExpectSameTensors(source, root + "/out.st");

  CommandResult l = Mpi(
      4, "load " + Quote(source) + " --mesh 2x2 --plan fsdp-tp --verify " + Quote(root + "/ckpt"));
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_THAT(l.out, AllOf(HasSubstr("loaded 21 tensors"), HasSubstr("into 4 ranks"),
                           HasSubstr("read: all (auto: every rank sees the same files)"),
                           HasSubstr("GB/s"), HasSubstr("read amplification"),
                           HasSubstr("every piece matches"), HasSubstr("peak memory per rank")));
  EXPECT_EQ(std::count(l.out.begin(), l.out.end(), '\n'), 5) << "rank 0 alone prints:\n" << l.out;
}

// --read all (every rank preads its own bytes) and --read root (rank 0 broadcasts) give the
// same pieces, verified bit-exact against the file: by each rank against its own slicing
// of it, or, read by the root (which only rank 0 need see), every tensor gathered to rank 0
// against rank 0's file; auto picks all on one machine.
TEST(DistributedCli, LoadReadAllAndRootAgree) {
  const std::string root = test::FreshDir("distributed_cli_read_modes");
  const std::string source = root + "/tiny.safetensors";
  ASSERT_EQ(Sdrt("make --dtype bf16 " + Quote(source)).exit_code, 0);
  std::map<std::string, nlohmann::json> got;
  for (const char* mode : {"all", "root", "auto", "direct"}) {
    SCOPED_TRACE(mode);
    const std::string m = mode;
    const std::string flags = m == "auto" ? "" : m == "direct" ? " --read all --direct-io"
                                                               : " --read " + m;
    CommandResult l =
        Mpi(2, absl::StrCat("load ", Quote(source), " --mesh 2 --plan fsdp --json", flags));
    ASSERT_EQ(l.exit_code, 0) << l.err;
    got[mode] = nlohmann::json::parse(l.out);
    if (m != "direct") {
      ExpectLoadJson(got[mode], 2, source, "fsdp", "2",
                     m == "root" ? source + " on rank 0 (each tensor gathered)" : source);
    } else {  // whole 4096-byte blocks: a small file's amplification is large
      EXPECT_TRUE(got[mode].value("bit_exact", false)) << got[mode];
    }
  }
  EXPECT_EQ(got["all"]["read"], "all");
  EXPECT_EQ(got["root"]["read"], "root");
  EXPECT_EQ(got["auto"]["read"], "all");
  EXPECT_EQ(got["auto"]["read_reason"], "auto: every rank sees the same files");
  EXPECT_EQ(got["direct"]["read"], "all");
  EXPECT_EQ(got["all"]["bytes_kept"], got["root"]["bytes_kept"]);
  EXPECT_EQ(got["direct"]["bytes_kept"], got["root"]["bytes_kept"]);
  // --direct-io needs every rank reading: with --read root it is bad input on every rank.
  CommandResult bad = Mpi(2, absl::StrCat("load ", Quote(source),
                                          " --mesh 2 --plan fsdp --read root --direct-io"));
  EXPECT_EQ(bad.exit_code, 2) << bad.all();
  EXPECT_THAT(bad.err, HasSubstr("--direct-io goes with --read all"));
  EXPECT_EQ(got["root"]["bytes_read"], nlohmann::json::array({TotalBytes(source), 0}));
  int64_t read = 0;
  for (const nlohmann::json& b : got["all"]["bytes_read"]) read += b.get<int64_t>();
  EXPECT_LE(static_cast<double>(read), 1.05 * static_cast<double>(TotalBytes(source)));
  if (!HasFailure()) fs::remove_all(root);
}

TEST(DistributedCli, DemoJsonAndTable) {
  const std::string cache = test::FreshDir("distributed_cli_demo");
  const std::string env = absl::StrCat("SDRT_MPIEXEC=", Quote(SDRT_MPIEXEC), " ");
  CommandResult json =
      Shell(env + Quote(SDRT_BINARY) + " demo --cache-dir " + Quote(cache) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.out << json.err;
  const nlohmann::json j = ParseJson(json.out);
  ASSERT_FALSE(j.is_discarded()) << json.out;
  EXPECT_EQ(j.value("ranks", 0), 4);
  EXPECT_TRUE(j.value("bit_exact", false)) << j;
  ASSERT_TRUE(j["rows"].is_array());
  ASSERT_EQ(j["rows"].size(), 6u) << j;  // fsdp and fsdp-tp: shard, gather, load
  std::vector<std::string> steps;
  for (const nlohmann::json& row : j["rows"]) {
    for (const char* key :
         {"plan", "mesh", "step", "bytes", "seconds", "gbps", "collectives", "bit_exact"}) {
      EXPECT_TRUE(row.contains(key)) << key << " missing: " << row;
    }
    EXPECT_TRUE(row.value("bit_exact", false)) << row;
    EXPECT_GT(row.value("bytes", int64_t{0}), 0) << row;
    steps.push_back(row.value("plan", "") + "/" + row.value("mesh", "") + "/" +
                    row.value("step", ""));
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"fsdp/4/shard", "fsdp/4/gather", "fsdp/4/load",
                                             "fsdp-tp/2x2/shard", "fsdp-tp/2x2/gather",
                                             "fsdp-tp/2x2/load"}));
  // The demo's own checkpoint is the one a later run reuses.
  // The work files were in a folder of this run's own, removed at the end.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(cache)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"tiny-llama-x2.safetensors"});

  CommandResult text =
      Shell(env + Quote(SDRT_BINARY) + " demo --cache-dir " + Quote(cache) + " --ranks 3");
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  const std::vector<std::string> lines = absl::StrSplit(text.out, '\n', absl::SkipEmpty());
  // A title, the header, the rule, then fsdp's three rows (3 is odd: no fsdp-tp).
  ASSERT_EQ(lines.size(), 6u) << text.out;
  EXPECT_THAT(lines[1], AllOf(HasSubstr("plan"), HasSubstr("ranks"), HasSubstr("bytes"),
                              HasSubstr("time"), HasSubstr("GB/s"), HasSubstr("bit-exact")));
  for (size_t i = 3; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], AllOf(HasSubstr("fsdp"), ::testing::EndsWith("yes"))) << text.out;
  }
}

// ---------------------------------------------------------------------------------------
// Errors.

class DistributedCliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(
        absl::StrCat("distributed_cli_errors_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    source_ = root_ + "/tiny.safetensors";
    ASSERT_EQ(Sdrt("make --dtype bf16 " + Quote(source_)).exit_code, 0);
    ckpt_ = root_ + "/ckpt";
    ASSERT_EQ(
        Sdrt("shard " + Quote(source_) + " " + Quote(ckpt_) + " --mesh 2 --plan fsdp").exit_code,
        0);
    out_dir_ = root_ + "/out";
    fs::create_directories(out_dir_);
    out_ = out_dir_ + "/gathered.safetensors";
  }

  // A good OUT written by a successful gather; returns its bytes.
  std::string GoodOut() {
    CommandResult r = Mpi(2, "gather " + Quote(ckpt_) + " " + Quote(out_));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ReadBytes(out_);
  }

  // A copy of the checkpoint to damage.
  std::string CopyCheckpoint(const std::string& name) {
    const std::string dir = root_ + "/" + name;
    fs::copy(ckpt_, dir);
    return dir;
  }

  std::string root_, source_, ckpt_, out_dir_, out_;
};

TEST_F(DistributedCliErrors, GatherWithTheWrongRankCount) {
  const std::string good = GoodOut();
  for (int ranks : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("-n ", ranks));
    std::vector<int> codes;
    CommandResult r =
        MpiPerRank(ranks, "gather " + Quote(ckpt_) + " " + Quote(out_), root_ + "/rc", &codes);
    ExpectOneLineError(r, 2, {ckpt_, "2 ranks", absl::StrCat("started ", ranks), "-n 2"});
    EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(ranks), 2)) << "exit code per rank";
  }
  EXPECT_EQ(ReadBytes(out_), good) << "a failed gather replaced OUT";
  EXPECT_EQ(ListDir(out_dir_), std::vector<std::string>{"gathered.safetensors"});
}

TEST_F(DistributedCliErrors, GatherFromAMissingFolder) {
  const std::string missing = root_ + "/no-such-ckpt";
  std::vector<int> codes;
  CommandResult r =
      MpiPerRank(2, "gather " + Quote(missing) + " " + Quote(out_), root_ + "/rc", &codes);
  ExpectOneLineError(r, 2, {missing});
  EXPECT_EQ(codes, (std::vector<int>{2, 2}));
  EXPECT_TRUE(ListDir(out_dir_).empty());
  // A folder that is not a sharded checkpoint.
  ExpectOneLineError(Mpi(2, "gather " + Quote(out_dir_) + " " + Quote(out_)), 2,
                     {out_dir_, "index.json"});
  EXPECT_TRUE(ListDir(out_dir_).empty());
}

TEST_F(DistributedCliErrors, GatherFromACorruptedHeader) {
  const std::string good = GoodOut();
  const std::string dir = CopyCheckpoint("bad-header");
  const std::string file = dir + "/rank-00001-of-00002.safetensors";
  std::string bytes = ReadBytes(file);
  ASSERT_EQ(bytes[8], '{');
  bytes[8] = '[';  // the header is no longer a JSON object
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  std::vector<int> codes;
  CommandResult r =
      MpiPerRank(2, "gather " + Quote(dir) + " " + Quote(out_), root_ + "/rc", &codes);
  ExpectOneLineError(r, 2, {"rank-00001-of-00002.safetensors"});
  EXPECT_EQ(codes, (std::vector<int>{2, 2}));
  EXPECT_EQ(ReadBytes(out_), good);
  EXPECT_EQ(ListDir(out_dir_), std::vector<std::string>{"gathered.safetensors"});
}

TEST_F(DistributedCliErrors, GatherFromATruncatedRankFile) {
  const std::string good = GoodOut();
  const std::string dir = CopyCheckpoint("truncated");
  const std::string file = dir + "/rank-00000-of-00002.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  std::vector<int> codes;
  CommandResult r =
      MpiPerRank(2, "gather " + Quote(dir) + " " + Quote(out_), root_ + "/rc", &codes);
  ExpectOneLineError(r, 2, {"rank-00000-of-00002.safetensors"});
  EXPECT_EQ(codes, (std::vector<int>{2, 2}));
  EXPECT_EQ(ReadBytes(out_), good);
}

// Damaged tensor bytes (the header is intact): the gathered tensor does not hash to the
// index's xxh64, so nothing is written.
TEST_F(DistributedCliErrors, GatherOfDamagedBytesKeepsTheGoodOut) {
  const std::string good = GoodOut();
  const std::string dir = CopyCheckpoint("bad-bytes");
  const std::string file = dir + "/rank-00001-of-00002.safetensors";
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(file);
  ASSERT_TRUE(f.ok()) << f.status();
  const SafetensorsEntry* e = f->Find("model.layers.1.mlp.down_proj.weight");
  ASSERT_NE(e, nullptr);
  ASSERT_GT(e->data_end, e->data_begin);
  const int64_t at = f->data_offset() + e->data_begin + 1;
  std::string bytes = ReadBytes(file);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x40);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  CommandResult r = Mpi(2, "gather " + Quote(dir) + " " + Quote(out_) + " --overwrite");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("model.layers.1.mlp.down_proj.weight"), HasSubstr(dir)));
  EXPECT_EQ(ReadBytes(out_), good) << "a failed gather replaced OUT";
  EXPECT_EQ(ListDir(out_dir_), std::vector<std::string>{"gathered.safetensors"});
  RecordProperty("damaged_bytes_exit_code", r.exit_code);
}

TEST_F(DistributedCliErrors, GatherIntoAMissingFolder) {
  const std::string out = root_ + "/missing/gathered.safetensors";
  const std::vector<std::string> before = ListDir(root_);
  CommandResult r = Mpi(2, "gather " + Quote(ckpt_) + " " + Quote(out));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(out));
  EXPECT_FALSE(fs::exists(root_ + "/missing"));
  EXPECT_EQ(ListDir(root_), before) << "something was left behind";
}

TEST_F(DistributedCliErrors, LoadWithAMeshOfAnotherSize) {
  for (const char* mesh : {"4", "2x2", "3"}) {
    SCOPED_TRACE(mesh);
    std::vector<int> codes;
    CommandResult r =
        MpiPerRank(2, absl::StrCat("load ", Quote(source_), " --mesh ", mesh, " --plan fsdp"),
                   root_ + "/rc", &codes);
    ExpectOneLineError(r, 2, {absl::StrCat("--mesh ", mesh), "started 2"});
    EXPECT_EQ(codes, (std::vector<int>{2, 2}));
  }
}

TEST_F(DistributedCliErrors, LoadWithABadPlanMeshOrFile) {
  std::vector<int> codes;
  CommandResult r =
      MpiPerRank(2, "load " + Quote(source_) + " --mesh 2 --plan zero3", root_ + "/rc", &codes);
  ExpectOneLineError(r, 2, {"unknown plan \"zero3\""});
  EXPECT_EQ(codes, (std::vector<int>{2, 2}));
  ExpectOneLineError(Mpi(2, "load " + Quote(source_) + " --mesh 2 --plan hsdp"), 2,
                     {"hsdp", "2-D mesh"});
  ExpectOneLineError(Mpi(2, "load " + Quote(source_) + " --mesh 2xq --plan fsdp"), 2, {"2xq"});
  ExpectOneLineError(Mpi(2, "load " + Quote(root_ + "/none.safetensors") + " --mesh 2 --plan fsdp"),
                     2, {root_ + "/none.safetensors"});
  ExpectOneLineError(Mpi(2, "load " + Quote(source_) + " --mesh 2 --plan fsdp --verify " +
                                Quote(root_ + "/no-such-ckpt")),
                     2, {root_ + "/no-such-ckpt"});
  // --verify against a checkpoint of another plan: the placements differ.
  ASSERT_EQ(Sdrt("shard " + Quote(source_) + " " + Quote(root_ + "/tp") + " --mesh 2 --plan tp")
                .exit_code,
            0);
  ExpectOneLineError(
      Mpi(2, "load " + Quote(source_) + " --mesh 2 --plan fsdp --verify " + Quote(root_ + "/tp")),
      2, {root_ + "/tp", "holds it as"});
  EXPECT_EQ(Mpi(2, "load").exit_code, 2);
  EXPECT_EQ(Mpi(2, "gather " + Quote(ckpt_)).exit_code, 2);  // no OUT
}

// --verify against a checkpoint with the same plan but another mesh: the pieces cannot
// match, which is the user's mistake (exit 2 naming the folder), not a failed load.
TEST_F(DistributedCliErrors, LoadVerifyAgainstAnotherMesh) {
  ASSERT_EQ(Sdrt("shard " + Quote(source_) + " " + Quote(root_ + "/four") + " --mesh 4 --plan fsdp")
                .exit_code,
            0);
  CommandResult r = Mpi(2, "load " + Quote(source_) + " --mesh 2 --plan fsdp --json --verify " +
                               Quote(root_ + "/four"));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(root_ + "/four"));
}

TEST(DistributedCli, HelpNamesTheOptions) {
  CommandResult g = Sdrt("gather --help");
  EXPECT_EQ(g.exit_code, 0);
  EXPECT_THAT(g.out, AllOf(HasSubstr("INDIR"), HasSubstr("OUT"), HasSubstr("--json"),
                           HasSubstr("--bucket-mib"), HasSubstr("--max-shard-size"),
                           HasSubstr("mpiexec")));
  CommandResult l = Sdrt("load --help");
  EXPECT_EQ(l.exit_code, 0);
  EXPECT_THAT(l.out, AllOf(HasSubstr("--mesh"), HasSubstr("--plan"), HasSubstr("--verify"),
                           HasSubstr("--json")));
  CommandResult d = Sdrt("demo --help");
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_THAT(d.out, AllOf(HasSubstr("--ranks"), HasSubstr("--json"), HasSubstr("--cache-dir")));
}

}  // namespace
}  // namespace sdrt
