// The C API (sdrt/c_api.h, included here from C++) under mpiexec -n 1 to 4 (3: uneven and
// empty shards): rank 0 writes a small safetensors file with the C++ library; every rank
// loads it through the C functions into malloc'd buffers laid out Shard(0), Shard(1) (into
// a strided buffer), Replicate and plain on a 1-D mesh and checks every element; the
// gathered state dict and the file sdrt_gather_write writes are read back; broadcast,
// distribute, a reshard plan executed twice, offload; the error paths with their exact
// status codes; weight maps: an HF Llama-shaped file loaded with the built-in "vllm-llama"
// map into fused qkv_proj / gate_up_proj and padded buffers (checked against the rows each
// rank must hold), split back by a JSON map through a reshard plan that outlives its map.
// The world comes from sdrt_comm_create_world (which initializes MPI).
#include "sdrt/c_api.h"

#include <mpi.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/minilm.h"
#include "sdrt/version.h"

namespace {

sdrt_comm_t g_world = nullptr;
int g_rank = 0;
int g_size = 1;
std::string g_dir;  // a folder shared by the ranks, made by rank 0

#define ASSERT_SDRT_OK(call) ASSERT_EQ((call), SDRT_OK) << sdrt_last_error()
#define EXPECT_SDRT(code, call) EXPECT_EQ((call), (code)) << sdrt_last_error()
// The call returns `code` and its last error contains `text`.
#define EXPECT_SDRT_ERROR(code, call, text)                                          \
  do {                                                                               \
    EXPECT_EQ((call), (code)) << sdrt_last_error();                                  \
    EXPECT_NE(std::strstr(sdrt_last_error(), (text)), nullptr) << sdrt_last_error(); \
  } while (false)

// The checkpoint: rows x cols tensors whose element (i, j) is Value(t, i, j).
struct Spec {
  const char* name;
  int64_t rows;
  int64_t cols;
};
const Spec kTensors[] = {{"layers.0.weight", 7, 5}, {"layers.0.bias", 4, 3}, {"embed", 5, 9},
                         {"norm", 2, 6}};
constexpr int kNumTensors = 4;

float Value(int t, int64_t i, int64_t j) { return t * 1000.0f + i * 10.0f + j + 0.5f; }

// torch.chunk's cut of n along `parts`: rank r's [begin, end).
std::pair<int64_t, int64_t> Chunk(int64_t n, int parts, int r) {
  const int64_t chunk = (n + parts - 1) / parts;
  const int64_t begin = std::min(n, chunk * r);
  return {begin, std::min(n, begin + chunk)};
}

std::string CheckpointPath() { return g_dir + "/model.safetensors"; }

void WriteCheckpoint() {
  if (g_rank != 0) return;
  std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
  for (int t = 0; t < kNumTensors; ++t) {
    sdrt::Tensor x = *sdrt::Tensor::Empty({kTensors[t].rows, kTensors[t].cols},
                                          sdrt::DType::kFloat32);
    float* p = x.data<float>();
    for (int64_t i = 0; i < kTensors[t].rows; ++i) {
      for (int64_t j = 0; j < kTensors[t].cols; ++j) p[i * kTensors[t].cols + j] = Value(t, i, j);
    }
    tensors.emplace_back(kTensors[t].name, x);
  }
  ASSERT_TRUE(sdrt::WriteSafetensors(CheckpointPath(), tensors).ok());
}

// A malloc'd float buffer of rows x cols elements, row stride `row_stride` (>= cols),
// freed by the test's Buffers.
struct Buffer {
  std::vector<float> data;  // at least one element so that data() is never null
  int64_t shape[2];
  int64_t strides[2];
  DLTensor dl;
  Buffer(int64_t rows, int64_t cols, int64_t row_stride) {
    data.assign(static_cast<size_t>(std::max<int64_t>(1, rows * row_stride)), -1.0f);
    shape[0] = rows;
    shape[1] = cols;
    strides[0] = row_stride;
    strides[1] = 1;
    std::memset(&dl, 0, sizeof dl);
    dl.data = data.data();
    dl.device.device_type = kDLCPU;
    dl.ndim = 2;
    dl.dtype.code = kDLFloat;
    dl.dtype.bits = 32;
    dl.dtype.lanes = 1;
    dl.shape = shape;
    dl.strides = strides;
  }
  float at(int64_t i, int64_t j) const { return data[static_cast<size_t>(i * strides[0] + j)]; }
};

// A 1-D mesh over every rank with `placement`, global rows x cols.
struct MeshSpec {
  int64_t mesh_shape[1];
  int64_t global[2];
  sdrt_dtensor_spec_t spec;
  MeshSpec(const char* placement, int64_t rows, int64_t cols) {
    mesh_shape[0] = g_size;
    global[0] = rows;
    global[1] = cols;
    spec = SDRT_DTENSOR_SPEC_INIT;
    spec.mesh_ndim = 1;
    spec.mesh_shape = mesh_shape;
    spec.placements = placement;
    spec.global_ndim = 2;
    spec.global_shape = global;
  }
};

// Rank g_rank's piece of tensor t for `placement` ("S(0)", "S(1)", "R"): its box.
struct Box {
  int64_t r0, r1, c0, c1;
};
Box PieceOf(int t, const std::string& placement) {
  Box b{0, kTensors[t].rows, 0, kTensors[t].cols};
  if (placement == "S(0)") std::tie(b.r0, b.r1) = Chunk(kTensors[t].rows, g_size, g_rank);
  if (placement == "S(1)") std::tie(b.c0, b.c1) = Chunk(kTensors[t].cols, g_size, g_rank);
  return b;
}

// A state dict of buffers for every tensor: tensor t laid out `placements[t]` ("" = plain),
// Shard(1) pieces in buffers with 3 spare elements per row.
struct Local {
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<std::unique_ptr<MeshSpec>> specs;
  std::vector<std::string> placements;
  sdrt_state_dict_t sd = nullptr;
  explicit Local(std::vector<std::string> p) : placements(std::move(p)) {
    EXPECT_EQ(sdrt_state_dict_create(&sd), SDRT_OK);
    for (int t = 0; t < kNumTensors; ++t) {
      const Box b = PieceOf(t, placements[t]);
      const int64_t cols = b.c1 - b.c0;
      buffers.push_back(std::make_unique<Buffer>(b.r1 - b.r0, cols,
                                                 placements[t] == "S(1)" ? cols + 3 : cols));
      const sdrt_dtensor_spec_t* spec = nullptr;
      if (!placements[t].empty()) {
        specs.push_back(std::make_unique<MeshSpec>(placements[t].c_str(), kTensors[t].rows,
                                                   kTensors[t].cols));
        spec = &specs.back()->spec;
      }
      EXPECT_EQ(sdrt_state_dict_add(sd, kTensors[t].name, &buffers.back()->dl, spec), SDRT_OK)
          << sdrt_last_error();
    }
  }
  ~Local() { sdrt_state_dict_destroy(sd); }
  // Every element of every piece equals the checkpoint's, times `scale`.
  void ExpectValues(float scale = 1.0f) const {
    for (int t = 0; t < kNumTensors; ++t) {
      const Box b = PieceOf(t, placements[t]);
      for (int64_t i = b.r0; i < b.r1; ++i) {
        for (int64_t j = b.c0; j < b.c1; ++j) {
          ASSERT_EQ(buffers[t]->at(i - b.r0, j - b.c0), scale * Value(t, i, j))
              << "rank " << g_rank << " " << kTensors[t].name << " [" << i << ", " << j << "]";
        }
      }
    }
  }
  void Scale(float scale) {
    for (auto& b : buffers) {
      for (float& x : b->data) x *= scale;
    }
  }
};

// Collective load options over the world (a static: the calls take its address).
const sdrt_load_options_t* LoadOptionsPtr() {
  static sdrt_load_options_t o = SDRT_LOAD_OPTIONS_INIT;
  o = SDRT_LOAD_OPTIONS_INIT;
  o.comm = g_world;
  o.timeout_seconds = 60;
  return &o;
}
sdrt_load_options_t LoadOptions() { return *LoadOptionsPtr(); }

sdrt_checkpoint_t OpenCheckpoint() {
  sdrt_checkpoint_t ckpt = nullptr;
  EXPECT_EQ(sdrt_checkpoint_open(CheckpointPath().c_str(), &ckpt), SDRT_OK) << sdrt_last_error();
  return ckpt;
}

const std::vector<std::string> kSharded = {"S(0)", "S(1)", "R", ""};

TEST(CApiHeader, CompilesAsCxxWithTheSameConstants) {
  static_assert(SDRT_OK == 0 && SDRT_UNAUTHENTICATED == 16, "absl::StatusCode values");
  sdrt_load_options_t o = SDRT_LOAD_OPTIONS_INIT;
  EXPECT_EQ(o.struct_size, sizeof(sdrt_load_options_t));
  EXPECT_EQ(o.rank, -1);
  EXPECT_EQ(o.staging_buffers, 2);
  EXPECT_EQ(sdrt_get_abi_version(), SDRT_C_ABI_VERSION);
  EXPECT_STREQ(sdrt_status_string(SDRT_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
}

TEST(CApiComm, RankSizeAndOtherConstructors) {
  int rank = -1;
  int size = -1;
  ASSERT_SDRT_OK(sdrt_comm_rank(g_world, &rank));
  ASSERT_SDRT_OK(sdrt_comm_size(g_world, &size));
  EXPECT_EQ(rank, g_rank);
  EXPECT_EQ(size, g_size);
  sdrt_comm_options_t options = SDRT_COMM_OPTIONS_INIT;
  options.timeout_seconds = 30;
  MPI_Comm world = MPI_COMM_WORLD;
  sdrt_comm_t dup = nullptr;
  ASSERT_SDRT_OK(sdrt_comm_create_from_mpi(&world, &options, &dup));
  ASSERT_SDRT_OK(sdrt_comm_rank(dup, &rank));
  EXPECT_EQ(rank, g_rank);
  EXPECT_SDRT(SDRT_OK, sdrt_comm_destroy(dup));
  sdrt_comm_t fortran = nullptr;
  ASSERT_SDRT_OK(sdrt_comm_create_from_mpi_fortran(MPI_Comm_c2f(MPI_COMM_WORLD), nullptr, &fortran));
  ASSERT_SDRT_OK(sdrt_comm_size(fortran, &size));
  EXPECT_EQ(size, g_size);
  EXPECT_SDRT(SDRT_OK, sdrt_comm_destroy(fortran));
  options.timeout_seconds = -1;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_mpi(&world, &options, &dup));
  options = SDRT_COMM_OPTIONS_INIT;
  options.struct_size = 4;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_world(&options, &dup));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_mpi(nullptr, nullptr, &dup));
  // An engine's ncclComm_t: the claims are checked before the pointer is touched, so a
  // fake one is safe here (the adoption itself runs in nccl_adopt_gpu_test).
  int fake = 0;
  sdrt_nccl_comm_options_t nccl = SDRT_NCCL_COMM_OPTIONS_INIT;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_nccl(nullptr, 0, 1, 0, &nccl, &dup));
  nccl.abort_on_error = 2;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_nccl(&fake, 0, 1, 0, &nccl, &dup));
  nccl = SDRT_NCCL_COMM_OPTIONS_INIT;
  if (SDRT_BUILT_WITH_NCCL) {
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_nccl(&fake, 0, 1, -1, &nccl, &dup));
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_nccl(&fake, 1, 1, 0, &nccl, &dup));
    if (sdrt::CudaDeviceCount() == 0) {
      EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_nccl(&fake, 0, 1, 0, &nccl, &dup));
      EXPECT_NE(std::string(sdrt_last_error()).find("visible CUDA devices"), std::string::npos)
          << sdrt_last_error();
    }
  } else {  // the stub's answer, once the handle's own checks pass
    EXPECT_SDRT(SDRT_UNAVAILABLE, sdrt_comm_create_from_nccl(&fake, 0, 1, 0, &nccl, &dup));
    EXPECT_NE(std::string(sdrt_last_error()).find("built without NCCL"), std::string::npos)
        << sdrt_last_error();
  }
}

TEST(CApiCheckpoint, ListsTensors) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  ASSERT_NE(ckpt, nullptr);
  sdrt_checkpoint_kind_t kind;
  ASSERT_SDRT_OK(sdrt_checkpoint_kind(ckpt, &kind));
  EXPECT_EQ(kind, SDRT_CHECKPOINT_SAFETENSORS_FILE);
  int64_t count = 0;
  ASSERT_SDRT_OK(sdrt_checkpoint_num_tensors(ckpt, &count));
  ASSERT_EQ(count, kNumTensors);
  std::vector<std::string> names;
  for (int64_t i = 0; i < count; ++i) {
    sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
    ASSERT_SDRT_OK(sdrt_checkpoint_tensor_info(ckpt, i, &info));
    EXPECT_EQ(info.dtype.code, kDLFloat);
    EXPECT_EQ(info.dtype.bits, 32);
    EXPECT_STREQ(info.dtype_name, "float32");
    ASSERT_EQ(info.ndim, 2);
    names.push_back(info.name);
    for (const Spec& s : kTensors) {
      if (s.name == names.back()) {
        EXPECT_EQ(info.shape[0], s.rows);
        EXPECT_EQ(info.shape[1], s.cols);
        EXPECT_EQ(info.nbytes, s.rows * s.cols * 4);
      }
    }
  }
  EXPECT_EQ(names.size(), 4u);
  sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
  EXPECT_SDRT(SDRT_OUT_OF_RANGE, sdrt_checkpoint_tensor_info(ckpt, count, &info));
  info.struct_size = sizeof(info) * 2;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_checkpoint_tensor_info(ckpt, 0, &info));
  EXPECT_SDRT(SDRT_OK, sdrt_checkpoint_close(ckpt));
}

// A folder of two safetensors files (no index) loads like the file; an sdrt sharded folder
// is listed (global shapes) and loads into the same buffers (a reshard from its layout).
TEST(CApiCheckpoint, FolderAndShardedFolder) {
  const std::string folder = g_dir + "/folder";
  const std::string sharded = g_dir + "/sharded";
  if (g_rank == 0) {
    absl::StatusOr<sdrt::SafetensorsFile> file = sdrt::SafetensorsFile::Open(CheckpointPath());
    ASSERT_TRUE(file.ok());
    ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
    for (int part = 0; part < 2; ++part) {
      std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
      for (int t = part; t < kNumTensors; t += 2) {
        tensors.emplace_back(kTensors[t].name, *file->Get(kTensors[t].name));
      }
      const std::string name = folder + "/part" + std::to_string(part) + ".safetensors";
      ASSERT_TRUE(sdrt::WriteSafetensors(name, tensors).ok());
    }
    auto mesh = std::make_shared<const sdrt::DeviceMesh>(*sdrt::DeviceMesh::FromString("2"));
    absl::StatusOr<sdrt::ShardedCheckpointIndex> index =
        sdrt::WriteShardedCheckpoint(*file, mesh, *sdrt::ShardingPlan::Builtin("fsdp"), sharded);
    ASSERT_TRUE(index.ok()) << index.status();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  sdrt_checkpoint_t ckpt = nullptr;
  sdrt_checkpoint_kind_t kind;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(folder.c_str(), &ckpt));
  ASSERT_SDRT_OK(sdrt_checkpoint_kind(ckpt, &kind));
  EXPECT_EQ(kind, SDRT_CHECKPOINT_SAFETENSORS_FOLDER);
  {
    Local local(kSharded);
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, LoadOptionsPtr()));
    local.ExpectValues();
  }
  sdrt_checkpoint_close(ckpt);

  ASSERT_SDRT_OK(sdrt_checkpoint_open(sharded.c_str(), &ckpt));
  ASSERT_SDRT_OK(sdrt_checkpoint_kind(ckpt, &kind));
  EXPECT_EQ(kind, SDRT_CHECKPOINT_SHARDED_FOLDER);
  int64_t count = 0;
  ASSERT_SDRT_OK(sdrt_checkpoint_num_tensors(ckpt, &count));
  EXPECT_EQ(count, kNumTensors);
  sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
  ASSERT_SDRT_OK(sdrt_checkpoint_tensor_info(ckpt, 0, &info));
  EXPECT_STREQ(info.name, kTensors[0].name);
  EXPECT_EQ(info.shape[0], kTensors[0].rows);  // global, not a rank's piece
  {
    // The 2-rank fsdp folder resharded into this run's buffers (np1: one rank reads both
    // rank files; np3: uneven and empty pieces, a rank with no rank file).
    Local local(kSharded);
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, LoadOptionsPtr()));
    local.ExpectValues();
    sdrt_stats_t stats = SDRT_STATS_INIT;
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    EXPECT_EQ(stats.reads, g_size == 1 ? 2 : (g_rank < 2 ? 1 : 0));
    int64_t kept = 0;
    for (const auto& b : local.buffers) kept += b->shape[0] * b->shape[1] * 4;
    EXPECT_EQ(stats.bytes_kept, kept);
    // What a rank does not hold in its own rank files arrives over the communicator.
    EXPECT_GE(stats.bytes_received + stats.bytes_read, stats.bytes_kept);
  }
  {
    // The same again with an entry the folder lacks: strict removes it and counts it.
    Local local(kSharded);
    Buffer extra(2, 2, 2);
    ASSERT_SDRT_OK(sdrt_state_dict_add(local.sd, "not.in.folder", &extra.dl, nullptr));
    sdrt_load_options_t o = LoadOptions();
    int64_t missing = -1;
    int64_t unexpected = -1;
    o.strict = 1;
    o.num_missing = &missing;
    o.num_unexpected = &unexpected;
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
    local.ExpectValues();
    EXPECT_EQ(missing, 1);
    EXPECT_EQ(unexpected, 0);
    int64_t index = -1;
    EXPECT_SDRT(SDRT_NOT_FOUND, sdrt_state_dict_find(local.sd, "not.in.folder", &index));
  }
  {
    // The reshard's bucket is bucket_bytes, not staging_bytes: a small staging size moves
    // nothing differently; 64-byte buckets take more rounds (with bytes to move), and give
    // the same values.
    Local local(kSharded);
    sdrt_load_options_t o = LoadOptions();
    sdrt_stats_t stats = SDRT_STATS_INIT;
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    const int64_t collectives = stats.collectives;
    o.staging_bytes = 4096;
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    EXPECT_EQ(stats.collectives, collectives);
    o.bucket_bytes = 64;
    Local small(kSharded);
    ASSERT_SDRT_OK(sdrt_load(ckpt, small.sd, &o));
    small.ExpectValues();
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    if (g_size > 1) {
      EXPECT_GT(stats.collectives, collectives);
    }
  }
  {
    Local local(kSharded);
    sdrt_load_options_t o = LoadOptions();
    o.comm = nullptr;
    o.rank = g_rank;
    EXPECT_SDRT(SDRT_FAILED_PRECONDITION, sdrt_load(ckpt, local.sd, &o));
    o = LoadOptions();
    o.direct_io = 1;
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
    o = LoadOptions();
    o.read = SDRT_READ_ROOT;
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
    EXPECT_NE(std::string(sdrt_last_error()).find("sharded folder"), std::string::npos)
        << sdrt_last_error();
  }
  // A rank file damaged after the folder was opened is the same error on every rank,
  // naming the file.
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    const std::string rank1 = sharded + "/" + sdrt::RankFileName(1, 2);
    ASSERT_EQ(::truncate(rank1.c_str(), 20), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    Local local(kSharded);
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, LoadOptionsPtr()));
    EXPECT_NE(std::string(sdrt_last_error()).find(sdrt::RankFileName(1, 2)), std::string::npos)
        << sdrt_last_error();
  }
  sdrt_checkpoint_close(ckpt);
}

// strict removes the entries the checkpoint lacks (and reports them); find by name.
TEST(CApiLoad, StrictAndFind) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  Local local(kSharded);
  Buffer extra(2, 2, 2);
  ASSERT_SDRT_OK(sdrt_state_dict_add(local.sd, "not.in.checkpoint", &extra.dl, nullptr));
  int64_t index = -1;
  ASSERT_SDRT_OK(sdrt_state_dict_find(local.sd, "not.in.checkpoint", &index));
  EXPECT_EQ(index, kNumTensors);
  EXPECT_SDRT(SDRT_NOT_FOUND, sdrt_state_dict_find(local.sd, "nope", &index));
  int64_t missing = -1;
  sdrt_load_options_t o = LoadOptions();
  o.strict = 1;
  o.num_missing = &missing;
  ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
  EXPECT_EQ(missing, 1);
  int64_t count = 0;
  ASSERT_SDRT_OK(sdrt_state_dict_count(local.sd, &count));
  EXPECT_EQ(count, kNumTensors);
  EXPECT_SDRT(SDRT_NOT_FOUND, sdrt_state_dict_find(local.sd, "not.in.checkpoint", &index));
  EXPECT_EQ(extra.at(0, 0), -1.0f);  // never written
  local.ExpectValues();
  sdrt_checkpoint_close(ckpt);
}

TEST(CApiLoad, EveryPlacementIntoMallocedBuffers) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  Local local(kSharded);
  int64_t missing = -1;
  int64_t unexpected = -1;
  sdrt_load_options_t o = LoadOptions();
  o.num_missing = &missing;
  o.num_unexpected = &unexpected;
  ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
  local.ExpectValues();
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(unexpected, 0);
  // The buffers are the ones given: get returns them.
  for (int t = 0; t < kNumTensors; ++t) {
    const char* name = nullptr;
    const DLTensor* view = nullptr;
    int is_dtensor = -1;
    ASSERT_SDRT_OK(sdrt_state_dict_get(local.sd, t, &name, &view, &is_dtensor));
    EXPECT_STREQ(name, kTensors[t].name);
    EXPECT_EQ(view->data, local.buffers[t]->data.data());
    EXPECT_EQ(is_dtensor, local.placements[t].empty() ? 0 : 1);
  }
  // Stats: this rank kept exactly its pieces' bytes.
  sdrt_stats_t stats = SDRT_STATS_INIT;
  ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
  int64_t kept = 0;
  for (int t = 0; t < kNumTensors; ++t) {
    const Box b = PieceOf(t, kSharded[t]);
    kept += (b.r1 - b.r0) * (b.c1 - b.c0) * 4;
  }
  EXPECT_EQ(stats.bytes_kept, kept);
  EXPECT_GE(stats.bytes_read, kept);
  EXPECT_GT(stats.seconds, 0.0);
  sdrt_checkpoint_close(ckpt);
}

// read ROOT: rank 0 reads the whole file and broadcasts the pieces in buckets of
// bucket_bytes, into the same buffers; read AUTO reads with every rank here (one machine).
TEST(CApiLoad, ReadRootBroadcastsFromRankZero) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  int64_t total = 0;
  int64_t kept = 0;
  for (int t = 0; t < kNumTensors; ++t) {
    const Box b = PieceOf(t, kSharded[t]);
    total += kTensors[t].rows * kTensors[t].cols * 4;
    kept += (b.r1 - b.r0) * (b.c1 - b.c0) * 4;
  }
  sdrt_stats_t stats = SDRT_STATS_INIT;
  sdrt_load_options_t o = LoadOptions();
  o.read = SDRT_READ_ROOT;
  o.bucket_bytes = 64;
  {
    Local local(kSharded);
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
    local.ExpectValues();
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    EXPECT_EQ(stats.bytes_read, g_rank == 0 ? total : 0);
    EXPECT_EQ(stats.bytes_kept, kept);
    // 64-byte buckets between ranks; one rank keeps what it reads and exchanges nothing.
    if (g_size > 1) {
      EXPECT_GT(stats.data_collectives, 1);
    } else {
      EXPECT_EQ(stats.data_collectives, 0);
    }
  }
  {
    Local local(kSharded);
    o.read = SDRT_READ_AUTO;
    ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
    local.ExpectValues();
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    EXPECT_EQ(stats.data_collectives, 0);
    EXPECT_EQ(stats.bytes_kept, kept);
    EXPECT_LE(stats.bytes_read, kept + kept / 32);
  }
  Local local(kSharded);
  o.read = 3;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  o.read = SDRT_READ_ROOT;
  o.direct_io = 1;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  o.direct_io = 0;
  o.bucket_bytes = 0;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  o.bucket_bytes = 64;
  o.comm = nullptr;
  o.rank = g_rank;
  EXPECT_SDRT(SDRT_FAILED_PRECONDITION, sdrt_load(ckpt, local.sd, &o));
  sdrt_checkpoint_close(ckpt);
}

TEST(CApiLoad, WithoutCommunicatorGivenTheRank) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  // Plain buffers only: every rank reads whole tensors, no communication.
  Local local({"", "", "", ""});
  sdrt_load_options_t o = SDRT_LOAD_OPTIONS_INIT;
  o.rank = g_rank;
  ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, &o));
  local.ExpectValues();
  o.rank = -1;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  sdrt_checkpoint_close(ckpt);
}

TEST(CApiLoad, ErrorPaths) {
  sdrt_checkpoint_t ckpt = nullptr;
  EXPECT_SDRT(SDRT_NOT_FOUND, sdrt_checkpoint_open((g_dir + "/missing.safetensors").c_str(), &ckpt));
  EXPECT_EQ(ckpt, nullptr);
  const std::string garbage = g_dir + "/garbage.safetensors";
  if (g_rank == 0) {
    FILE* f = std::fopen(garbage.c_str(), "wb");
    std::fputs("not a safetensors file", f);
    std::fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_checkpoint_open(garbage.c_str(), &ckpt));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_checkpoint_open(nullptr, &ckpt));

  ckpt = OpenCheckpoint();
  Local local(kSharded);
  sdrt_load_options_t o = LoadOptions();
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(nullptr, local.sd, &o));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, nullptr, &o));
  o.struct_size = sizeof(o) - 8;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  o.struct_size = sizeof(o) + 8;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  EXPECT_NE(std::strstr(sdrt_last_error(), "newer header"), nullptr) << sdrt_last_error();
  o = LoadOptions();
  o.staging_buffers = 0;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));
  o = LoadOptions();
  o.timeout_seconds = -5;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o));

  // A buffer of the wrong shape on the last rank only: the same error on every rank.
  {
    Local wrong(kSharded);
    if (g_rank == g_size - 1) {
      Buffer bad(9, 9, 9);
      MeshSpec spec("S(0)", 7, 5);
      ASSERT_SDRT_OK(sdrt_state_dict_add(wrong.sd, "layers.0.weight", &bad.dl, &spec.spec));
      EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, wrong.sd, LoadOptionsPtr()));
    } else {
      EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, wrong.sd, LoadOptionsPtr()));
    }
  }
  // A global shape that is not the checkpoint's.
  {
    Local wrong(kSharded);
    Buffer bad(4, 4, 4);
    ASSERT_SDRT_OK(sdrt_state_dict_add(wrong.sd, "norm", &bad.dl, nullptr));
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, wrong.sd, LoadOptionsPtr()));
    EXPECT_NE(std::strstr(sdrt_last_error(), "norm"), nullptr) << sdrt_last_error();
  }
  // A bad placements string.
  {
    sdrt_state_dict_t sd = nullptr;
    ASSERT_SDRT_OK(sdrt_state_dict_create(&sd));
    Buffer b(7, 5, 5);
    MeshSpec spec("Q(7)", 7, 5);
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_state_dict_add(sd, "w", &b.dl, &spec.spec));
    spec.spec.struct_size = 3;
    EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_state_dict_add(sd, "w", &b.dl, &spec.spec));
    sdrt_state_dict_destroy(sd);
  }
  // The last call's stats exist even after a failure.
  sdrt_stats_t stats = SDRT_STATS_INIT;
  EXPECT_SDRT(SDRT_OK, sdrt_get_last_stats(&stats));
  sdrt_checkpoint_close(ckpt);
}

TEST(CApiGather, GatherAndWriteRoundTrip) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  Local local(kSharded);
  ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, LoadOptionsPtr()));
  sdrt_checkpoint_close(ckpt);

  sdrt_gather_options_t g = SDRT_GATHER_OPTIONS_INIT;
  g.comm = g_world;
  g.timeout_seconds = 60;
  g.bucket_bytes = 64;  // several buckets
  sdrt_state_dict_t full = nullptr;
  ASSERT_SDRT_OK(sdrt_gather(local.sd, &g, &full));
  int64_t count = 0;
  ASSERT_SDRT_OK(sdrt_state_dict_count(full, &count));
  ASSERT_EQ(count, kNumTensors);
  for (int t = 0; t < kNumTensors; ++t) {
    const char* name = nullptr;
    const DLTensor* view = nullptr;
    ASSERT_SDRT_OK(sdrt_state_dict_get(full, t, &name, &view, nullptr));
    ASSERT_EQ(view->shape[0], kTensors[t].rows);
    const float* p = static_cast<const float*>(view->data);
    for (int64_t i = 0; i < kTensors[t].rows * kTensors[t].cols; ++i) {
      ASSERT_EQ(p[i], Value(t, i / kTensors[t].cols, i % kTensors[t].cols)) << name;
    }
  }
  sdrt_stats_t stats = SDRT_STATS_INIT;
  ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
  if (g_size > 1) {  // one rank gathers without moving data
    EXPECT_GT(stats.data_collectives, 1);
    EXPECT_GT(stats.bytes_sent, 0);
  }
  EXPECT_GT(stats.collectives, 0);
  sdrt_state_dict_destroy(full);

  // ranks_only: the last rank keeps the result, the others get an empty state dict.
  const int32_t keeper = g_size - 1;
  g.ranks_only = &keeper;
  g.num_ranks_only = 1;
  ASSERT_SDRT_OK(sdrt_gather(local.sd, &g, &full));
  ASSERT_SDRT_OK(sdrt_state_dict_count(full, &count));
  EXPECT_EQ(count, g_rank == keeper ? kNumTensors : 0);
  sdrt_state_dict_destroy(full);
  g.ranks_only = nullptr;
  g.num_ranks_only = 0;

  const std::string out = g_dir + "/gathered.safetensors";
  ASSERT_SDRT_OK(sdrt_gather_write(local.sd, g_rank == 0 ? out.c_str() : nullptr, &g));
  MPI_Barrier(MPI_COMM_WORLD);
  absl::StatusOr<sdrt::SafetensorsFile> written = sdrt::SafetensorsFile::Open(out);
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<sdrt::SafetensorsFile> source = sdrt::SafetensorsFile::Open(CheckpointPath());
  ASSERT_TRUE(source.ok());
  for (const Spec& s : kTensors) {
    absl::StatusOr<sdrt::Tensor> a = written->Get(s.name);
    absl::StatusOr<sdrt::Tensor> b = source->Get(s.name);
    ASSERT_TRUE(a.ok() && b.ok()) << s.name;
    ASSERT_EQ(a->shape(), b->shape());
    EXPECT_EQ(std::memcmp(a->data_ptr(), b->data_ptr(), static_cast<size_t>(b->nbytes())), 0)
        << s.name;
  }
  ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
  if (g_rank == 0) {
    EXPECT_GT(stats.bytes_written, 0);
  }

  // A folder that does not exist: the writer's error on every rank.
  const std::string bad = g_dir + "/no/such/folder/x.safetensors";
  EXPECT_SDRT(SDRT_NOT_FOUND, sdrt_gather_write(local.sd, bad.c_str(), &g));
  g.comm = nullptr;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_gather(local.sd, &g, &full));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_gather(local.sd, nullptr, &full));
}

TEST(CApiBroadcast, FromRootIntoShards) {
  // The root's full state dict: the checkpoint's tensors, through the C API (plain load).
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  Local full({"", "", "", ""});
  sdrt_load_options_t o = SDRT_LOAD_OPTIONS_INIT;
  o.rank = g_rank;
  ASSERT_SDRT_OK(sdrt_load(ckpt, full.sd, &o));
  sdrt_checkpoint_close(ckpt);

  Local local({"S(1)", "S(0)", "S(0)", "R"});
  sdrt_broadcast_options_t b = SDRT_BROADCAST_OPTIONS_INIT;
  b.comm = g_world;
  b.root = g_size - 1;
  b.timeout_seconds = 60;
  sdrt_state_dict_t empty = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&empty));
  ASSERT_SDRT_OK(sdrt_broadcast(g_rank == b.root ? full.sd : empty, local.sd, &b));
  local.ExpectValues();
  b.root = g_size;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT,
              sdrt_broadcast(g_rank == 0 ? full.sd : empty, local.sd, &b));
  sdrt_state_dict_destroy(empty);

  // Distribute: every rank holds the full state dict.
  Local dist({"S(0)", "R", "S(1)", ""});
  sdrt_distribute_options_t d = SDRT_DISTRIBUTE_OPTIONS_INIT;
  d.comm = g_world;
  ASSERT_SDRT_OK(sdrt_distribute(full.sd, dist.sd, &d));
  dist.ExpectValues();
}

// The reshard tests' sides: the checkpoint loaded sharded, and destination buffers in
// another layout.
struct ReshardSides {
  Local source{kSharded};
  Local destination{{"S(1)", "S(0)", "S(1)", "S(0)"}};
  sdrt_reshard_options_t options = SDRT_RESHARD_OPTIONS_INIT;

  // Loads the source and plans source -> destination (128-byte buckets: many exchanges).
  void Plan(sdrt_reshard_plan_t* plan) {
    sdrt_checkpoint_t ckpt = OpenCheckpoint();
    ASSERT_SDRT_OK(sdrt_load(ckpt, source.sd, LoadOptionsPtr()));
    sdrt_checkpoint_close(ckpt);
    options.comm = g_world;
    options.timeout_seconds = 60;
    options.bucket_bytes = 128;
    ASSERT_SDRT_OK(sdrt_reshard_plan_create(source.sd, destination.sd, &options, plan));
  }
};

TEST(CApiReshard, PlanOnceExecuteTwice) {
  ReshardSides sides;
  Local& source = sides.source;
  Local& destination = sides.destination;
  sdrt_reshard_plan_t plan = nullptr;
  ASSERT_NO_FATAL_FAILURE(sides.Plan(&plan));
  sdrt_reshard_execute_options_t e = SDRT_RESHARD_EXECUTE_OPTIONS_INIT;
  e.timeout_seconds = 60;
  ASSERT_SDRT_OK(sdrt_reshard_execute(plan, source.sd, destination.sd, &e));
  destination.ExpectValues();
  sdrt_stats_t stats = SDRT_STATS_INIT;
  ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
  if (g_size > 1) {
    EXPECT_GT(stats.bytes_received, 0);
  }
  // The next step: new values in the same buffers, the same plan.
  source.Scale(2.0f);
  ASSERT_SDRT_OK(sdrt_reshard_execute(plan, source.sd, destination.sd, nullptr));
  destination.ExpectValues(2.0f);
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT,
              sdrt_reshard_execute(nullptr, source.sd, destination.sd, nullptr));
  e.struct_size = sizeof(e) + 4;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_reshard_execute(plan, source.sd, destination.sd, &e));
  EXPECT_SDRT(SDRT_OK, sdrt_reshard_plan_destroy(plan));
  sides.options.struct_size = 1;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT,
              sdrt_reshard_plan_create(source.sd, destination.sd, &sides.options, &plan));
}

TEST(CApiReshard, BoundOnceExecutedEveryStep) {
  ReshardSides sides;
  Local& source = sides.source;
  Local& destination = sides.destination;
  sdrt_reshard_plan_t plan = nullptr;
  ASSERT_NO_FATAL_FAILURE(sides.Plan(&plan));
  sdrt_reshard_execute_options_t e = SDRT_RESHARD_EXECUTE_OPTIONS_INIT;
  e.timeout_seconds = 60;
  sdrt_reshard_bound_t bound = nullptr;
  ASSERT_SDRT_OK(sdrt_reshard_bind(plan, source.sd, destination.sd, &e, &bound));
  // The binding keeps what it needs of the plan.
  ASSERT_SDRT_OK(sdrt_reshard_plan_destroy(plan));
  ASSERT_SDRT_OK(sdrt_reshard_bound_execute(bound, &e));
  destination.ExpectValues();
  sdrt_stats_t stats = SDRT_STATS_INIT;
  ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
  if (g_size > 1) {
    EXPECT_GT(stats.bytes_received, 0);
  }
  // Every step: new values in the same source buffers, the same binding.
  for (float scale : {2.0f, 3.0f}) {
    source.Scale(scale);
    ASSERT_SDRT_OK(sdrt_reshard_bound_execute(bound, nullptr));
    destination.ExpectValues(scale == 2.0f ? 2.0f : 6.0f);
  }
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_reshard_bound_execute(nullptr, nullptr));
  e.struct_size = sizeof(e) + 4;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_reshard_bound_execute(bound, &e));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT,
              sdrt_reshard_bind(nullptr, source.sd, destination.sd, nullptr, &bound));
  EXPECT_SDRT(SDRT_OK, sdrt_reshard_bound_destroy(bound));
}

// Handles survive misuse (the local cases without MPI are in c_api_header_c.c): each kind
// destroyed twice, used after its destroy and passed where another kind is expected; a plan
// and a binding whose communicator was destroyed; Fortran handles that are not a
// communicator's. Each is refused on every rank before any collective runs.
TEST(CApiHandles, MisuseIsAnErrorNotACrash) {
  const char* kGone = "handle that was already destroyed";
  Local local(kSharded);
  // A checkpoint.
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  ASSERT_SDRT_OK(sdrt_checkpoint_close(ckpt));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_checkpoint_close(ckpt));
  EXPECT_STREQ(sdrt_last_error(),
               "sdrt_checkpoint_close: checkpoint is a checkpoint handle that was already "
               "destroyed");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, LoadOptionsPtr()),
                    "sdrt_load: checkpoint is a checkpoint handle that was already destroyed");
  ckpt = OpenCheckpoint();
  EXPECT_SDRT_ERROR(
      SDRT_INVALID_ARGUMENT,
      sdrt_load(reinterpret_cast<sdrt_checkpoint_t>(local.sd), local.sd, LoadOptionsPtr()),
      "sdrt_load: checkpoint is a state dict handle, not a checkpoint");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_load(ckpt, reinterpret_cast<sdrt_state_dict_t>(ckpt), LoadOptionsPtr()),
                    "sdrt_load: state_dict is a checkpoint handle, not a state dict");

  // A state dict.
  sdrt_state_dict_t gone = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&gone));
  ASSERT_SDRT_OK(sdrt_state_dict_destroy(gone));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_state_dict_destroy(gone),
                    "sdrt_state_dict_destroy: state_dict is a state dict handle that was "
                    "already destroyed");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, gone, LoadOptionsPtr()), kGone);
  sdrt_gather_options_t g = SDRT_GATHER_OPTIONS_INIT;
  g.comm = g_world;
  sdrt_state_dict_t out = nullptr;
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_gather(gone, &g, &out),
                    "sdrt_gather: state_dict is a state dict handle that was already destroyed");
  EXPECT_EQ(out, nullptr);

  // A communicator.
  MPI_Comm world = MPI_COMM_WORLD;
  sdrt_comm_t comm = nullptr;
  ASSERT_SDRT_OK(sdrt_comm_create_from_mpi(&world, nullptr, &comm));
  ASSERT_SDRT_OK(sdrt_comm_destroy(comm));
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT, sdrt_comm_destroy(comm));
  EXPECT_STREQ(sdrt_last_error(),
               "sdrt_comm_destroy: comm is a communicator handle that was already destroyed");
  int rank = -1;
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_comm_rank(comm, &rank), kGone);
  EXPECT_EQ(rank, -1);
  sdrt_load_options_t o = LoadOptions();
  o.comm = comm;
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, local.sd, &o),
                    "sdrt_load: comm is a communicator handle that was already destroyed");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_comm_rank(reinterpret_cast<sdrt_comm_t>(ckpt), &rank),
                    "sdrt_comm_rank: comm is a checkpoint handle, not a communicator");
  ASSERT_SDRT_OK(sdrt_checkpoint_close(ckpt));

  // A plan and a binding.
  ReshardSides sides;
  Local& source = sides.source;
  Local& destination = sides.destination;
  sdrt_reshard_plan_t plan = nullptr;
  ASSERT_NO_FATAL_FAILURE(sides.Plan(&plan));
  sdrt_reshard_bound_t bound = nullptr;
  ASSERT_SDRT_OK(sdrt_reshard_bind(plan, source.sd, destination.sd, nullptr, &bound));
  ASSERT_SDRT_OK(sdrt_reshard_plan_destroy(plan));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_reshard_plan_destroy(plan),
                    "sdrt_reshard_plan_destroy: plan is a reshard plan handle that was already "
                    "destroyed");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_execute(plan, source.sd, destination.sd, nullptr), kGone);
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_bind(plan, source.sd, destination.sd, nullptr, &bound), kGone);
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_execute(reinterpret_cast<sdrt_reshard_plan_t>(bound), source.sd,
                                         destination.sd, nullptr),
                    "plan is a bound reshard handle, not a reshard plan");
  ASSERT_SDRT_OK(sdrt_reshard_bound_destroy(bound));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_reshard_bound_destroy(bound),
                    "sdrt_reshard_bound_destroy: bound is a bound reshard handle that was "
                    "already destroyed");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_reshard_bound_execute(bound, nullptr), kGone);

  // A plan and a binding whose communicator the program destroyed first: refused, and
  // still destroyed cleanly.
  ASSERT_SDRT_OK(sdrt_comm_create_from_mpi(&world, nullptr, &comm));
  sides.options.comm = comm;
  ASSERT_SDRT_OK(sdrt_reshard_plan_create(source.sd, destination.sd, &sides.options, &plan));
  ASSERT_SDRT_OK(sdrt_reshard_bind(plan, source.sd, destination.sd, nullptr, &bound));
  ASSERT_SDRT_OK(sdrt_comm_destroy(comm));
  const char* kCommGone =
      "the plan's communicator is a communicator handle that was already destroyed (destroy "
      "plans and bindings before their communicator)";
  EXPECT_SDRT_ERROR(SDRT_FAILED_PRECONDITION,
                    sdrt_reshard_execute(plan, source.sd, destination.sd, nullptr), kCommGone);
  EXPECT_SDRT_ERROR(SDRT_FAILED_PRECONDITION, sdrt_reshard_bound_execute(bound, nullptr),
                    kCommGone);
  sdrt_reshard_bound_t rebound = nullptr;
  EXPECT_SDRT_ERROR(SDRT_FAILED_PRECONDITION,
                    sdrt_reshard_bind(plan, source.sd, destination.sd, nullptr, &rebound),
                    kCommGone);
  EXPECT_EQ(rebound, nullptr);
  EXPECT_SDRT(SDRT_OK, sdrt_reshard_bound_destroy(bound));
  EXPECT_SDRT(SDRT_OK, sdrt_reshard_plan_destroy(plan));

  // Fortran handles that are not a communicator's, refused before MPI sees them.
  sdrt_comm_t fortran = nullptr;
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_comm_create_from_mpi_fortran(int64_t{1} << 40, nullptr, &fortran),
                    "Fortran communicator handle 1099511627776 is outside MPI_Fint's range");
  const int64_t null_handle = MPI_Comm_c2f(MPI_COMM_NULL);
  EXPECT_SDRT_ERROR(
      SDRT_INVALID_ARGUMENT, sdrt_comm_create_from_mpi_fortran(null_handle, nullptr, &fortran),
      ("Fortran communicator handle " + std::to_string(null_handle) + " is MPI_COMM_NULL").c_str());
#if defined(MPICH)
  // MPICH's MPI_Comm_f2c is a cast: garbage, a datatype, and a builtin communicator other
  // than MPI_COMM_WORLD and MPI_COMM_SELF are told apart by their bits.
  for (const int64_t garbage : {int64_t{12345}, int64_t{-1}, int64_t{MPI_Type_c2f(MPI_INT)},
                                int64_t{MPI_Comm_c2f(MPI_COMM_SELF)} + 5}) {
    const std::string named = "Fortran handle " + std::to_string(garbage) + " (";
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                      sdrt_comm_create_from_mpi_fortran(garbage, nullptr, &fortran), named.c_str());
    EXPECT_NE(std::strstr(sdrt_last_error(), "is not an MPI communicator"), nullptr);
  }
#endif
  EXPECT_EQ(fortran, nullptr);
}

TEST(CApiOffload, CopiesIntoMemorySdrtOwns) {
  sdrt_checkpoint_t ckpt = OpenCheckpoint();
  Local local(kSharded);
  ASSERT_SDRT_OK(sdrt_load(ckpt, local.sd, LoadOptionsPtr()));
  sdrt_checkpoint_close(ckpt);
  sdrt_state_dict_t cpu = nullptr;
  ASSERT_SDRT_OK(sdrt_offload(local.sd, nullptr, &cpu));
  for (int t = 0; t < kNumTensors; ++t) {
    const char* name = nullptr;
    const DLTensor* view = nullptr;
    int is_dtensor = -1;
    ASSERT_SDRT_OK(sdrt_state_dict_get(cpu, t, &name, &view, &is_dtensor));
    EXPECT_NE(view->data, local.buffers[t]->data.data());
    EXPECT_EQ(is_dtensor, kSharded[t].empty() ? 0 : 1);
    const Box b = PieceOf(t, kSharded[t]);
    ASSERT_EQ(view->shape[0], b.r1 - b.r0);
    ASSERT_EQ(view->shape[1], b.c1 - b.c0);
    const float* p = static_cast<const float*>(view->data);
    for (int64_t i = b.r0; i < b.r1; ++i) {
      for (int64_t j = b.c0; j < b.c1; ++j) {
        ASSERT_EQ(p[(i - b.r0) * (b.c1 - b.c0) + (j - b.c0)], Value(t, i, j));
      }
    }
  }
  sdrt_state_dict_destroy(cpu);
}

// timeout_seconds reaches the communicator: rank 1 skips a gather on a duplicate of the
// world, the others get DEADLINE_EXCEEDED after about 0.3 s and the communicator is then
// FAILED_PRECONDITION; rank 1 joins late so that no request is left behind (its status is
// either). The pattern of tests/comm/mpi_deadline_mpi_test.cc.
TEST(CApiDeadline, TimeoutOfTheOptionsApplies) {
  if (g_size < 2) GTEST_SKIP() << "needs a second rank";
  MPI_Comm world = MPI_COMM_WORLD;
  sdrt_comm_t comm = nullptr;
  ASSERT_SDRT_OK(sdrt_comm_create_from_mpi(&world, nullptr, &comm));
  static Local* local = new Local({"S(0)", "S(1)", "R", ""});  // kept: MPI may still write
  sdrt_gather_options_t g = SDRT_GATHER_OPTIONS_INIT;
  g.comm = comm;
  g.timeout_seconds = 0.3;
  sdrt_state_dict_t out = nullptr;
  if (g_rank != 1) {
    const double start = MPI_Wtime();
    EXPECT_SDRT(SDRT_DEADLINE_EXCEEDED, sdrt_gather(local->sd, &g, &out));
    EXPECT_NE(std::strstr(sdrt_last_error(), "rank 1 did not arrive"), nullptr)
        << sdrt_last_error();
    EXPECT_LT(MPI_Wtime() - start, 5.0);
    EXPECT_SDRT(SDRT_FAILED_PRECONDITION, sdrt_gather(local->sd, &g, &out));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 1) {
    const sdrt_status_t late = sdrt_gather(local->sd, &g, &out);
    if (late == SDRT_OK) sdrt_state_dict_destroy(out);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  sdrt_comm_destroy(comm);
}

// all-MiniLM-L6-v2 loaded through the C API with every tensor Shard(0) over the world
// (uneven and empty pieces at 3 ranks), each rank's bytes compared with the file's rows.
TEST(CApiMiniLM, ShardZeroEveryTensor) {
  SDRT_MINILM_OR_SKIP(path);
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(path.c_str(), &ckpt));
  int64_t count = 0;
  ASSERT_SDRT_OK(sdrt_checkpoint_num_tensors(ckpt, &count));
  ASSERT_GT(count, 0);
  sdrt_state_dict_t sd = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&sd));
  struct Piece {
    std::string name;
    std::vector<char> bytes;
    std::vector<int64_t> shape;
    std::vector<int64_t> global;
    int64_t begin_byte = 0;
    DLTensor dl;
    int64_t mesh_shape[1];
    sdrt_dtensor_spec_t spec;
  };
  std::vector<std::unique_ptr<Piece>> pieces;
  for (int64_t i = 0; i < count; ++i) {
    sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
    ASSERT_SDRT_OK(sdrt_checkpoint_tensor_info(ckpt, i, &info));
    if (info.ndim == 0) continue;
    auto p = std::make_unique<Piece>();
    p->name = info.name;
    p->global.assign(info.shape, info.shape + info.ndim);
    p->shape = p->global;
    const auto [r0, r1] = Chunk(p->global[0], g_size, g_rank);
    p->shape[0] = r1 - r0;
    const int64_t row_bytes = p->global[0] == 0 ? 0 : info.nbytes / p->global[0];
    p->begin_byte = r0 * row_bytes;
    p->bytes.assign(static_cast<size_t>(std::max<int64_t>(1, (r1 - r0) * row_bytes)), 0);
    std::memset(&p->dl, 0, sizeof p->dl);
    p->dl.data = p->bytes.data();
    p->dl.device.device_type = kDLCPU;
    p->dl.ndim = info.ndim;
    p->dl.dtype = info.dtype;
    p->dl.shape = p->shape.data();
    p->mesh_shape[0] = g_size;
    p->spec = SDRT_DTENSOR_SPEC_INIT;
    p->spec.mesh_ndim = 1;
    p->spec.mesh_shape = p->mesh_shape;
    p->spec.placements = "S(0)";
    p->spec.global_ndim = info.ndim;
    p->spec.global_shape = p->global.data();
    ASSERT_SDRT_OK(sdrt_state_dict_add(sd, info.name, &p->dl, &p->spec));
    pieces.push_back(std::move(p));
  }
  ASSERT_SDRT_OK(sdrt_load(ckpt, sd, LoadOptionsPtr()));
  absl::StatusOr<sdrt::CheckpointSource> source = sdrt::CheckpointSource::Open(path);
  ASSERT_TRUE(source.ok()) << source.status();
  for (const auto& p : pieces) {
    absl::StatusOr<sdrt::Tensor> full = source->Get(p->name);
    ASSERT_TRUE(full.ok()) << full.status();
    const size_t n = p->shape[0] == 0 ? 0 : p->bytes.size();  // an empty piece keeps 1 byte
    const char* file_bytes = static_cast<const char*>(full->data_ptr()) + p->begin_byte;
    ASSERT_EQ(std::memcmp(p->bytes.data(), file_bytes, n), 0) << p->name;
  }
  sdrt_state_dict_destroy(sd);
  sdrt_checkpoint_close(ckpt);
}

// ---- Weight maps (sdrt_weight_map_t) --------------------------------------------------------

// A Hugging Face Llama-shaped file: 3 layers with 12 query heads of 2 rows each and 1, 2 and
// 4 kv heads (so that at 2 to 4 ranks some kv heads are cut and some replicated), gate and
// up projections of 12 rows, a 10-row embedding, a norm; every element distinct.
constexpr int64_t kHeadSize = 2;
constexpr int64_t kCols = 3;
constexpr int64_t kQHeads = 12;
constexpr int64_t kMlpRows = 12;
constexpr int64_t kVocab = 10;
constexpr int64_t kPaddedVocab = 64;  // the built-in map pads the vocabulary to 64 rows
constexpr int kLayers = 3;
constexpr int64_t kKvHeads[kLayers] = {1, 2, 4};
const char* const kProjections[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                    "mlp.gate_proj", "mlp.up_proj"};

std::string LlamaPath() { return g_dir + "/llama.safetensors"; }

std::string LayerName(int layer, const std::string& what) {
  return "model.layers." + std::to_string(layer) + "." + what + ".weight";
}

struct HfTensor {
  std::string name;
  int64_t rows;
};

// The file's tensors, in its order (a tensor's index makes its values).
const std::vector<HfTensor>& HfTensors() {
  static const std::vector<HfTensor>* tensors = [] {
    auto* t = new std::vector<HfTensor>{{"model.embed_tokens.weight", kVocab}};
    for (int l = 0; l < kLayers; ++l) {
      const int64_t kv = kKvHeads[l] * kHeadSize;
      const int64_t rows[] = {kQHeads * kHeadSize, kv, kv, kMlpRows, kMlpRows};
      for (int p = 0; p < 5; ++p) t->push_back({LayerName(l, kProjections[p]), rows[p]});
    }
    t->push_back({"model.norm.weight", 2});
    return t;
  }();
  return *tensors;
}

int HfIndex(const std::string& name) {
  for (size_t t = 0; t < HfTensors().size(); ++t) {
    if (HfTensors()[t].name == name) return static_cast<int>(t);
  }
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

float HfValue(int t, int64_t i, int64_t j) { return 1.0f + t * 1000.0f + i * 10.0f + j; }

void WriteLlamaCheckpoint() {
  if (g_rank != 0) return;
  std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
  for (int t = 0; t < static_cast<int>(HfTensors().size()); ++t) {
    const HfTensor& h = HfTensors()[t];
    sdrt::Tensor x = *sdrt::Tensor::Empty({h.rows, kCols}, sdrt::DType::kFloat32);
    for (int64_t i = 0; i < h.rows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) x.data<float>()[i * kCols + j] = HfValue(t, i, j);
    }
    tensors.emplace_back(h.name, x);
  }
  ASSERT_TRUE(sdrt::WriteSafetensors(LlamaPath(), tensors).ok());
}

// Whether layer l's kv heads fit this world: cut into whole heads, or each replicated on
// the ranks that share it (vLLM's rule; 2 kv heads cannot go to 3 ranks).
bool LayerFits(int l) { return kKvHeads[l] % g_size == 0 || g_size % kKvHeads[l] == 0; }

// This rank's rows of a component of `rows` rows in a buffer fused by vLLM's tensor
// parallelism: rows / ranks of them (whole heads of `unit` rows), or with fewer heads than
// ranks head rank / (ranks / heads).
std::pair<int64_t, int64_t> PartRows(int64_t rows, int64_t unit) {
  const int64_t heads = rows / unit;
  if (heads % g_size == 0) {
    const int64_t n = rows / g_size;
    return {g_rank * n, g_rank * n + n};
  }
  const int64_t head = g_rank / (g_size / heads);
  return {head * unit, head * unit + unit};
}

// The engine's buffers, vLLM-style, each Shard(0) over the world (tensor parallel): per
// layer that fits, a fused qkv_proj ([q rows; k rows; v rows] of this rank) and gate_up_proj
// ([gate rows; up rows]); the embedding padded to 64 rows; the norm plain. Each buffer
// knows which rows of which file tensor it must hold, then zero rows (the padding).
struct VllmEngine {
  struct Segment {
    int tensor;
    int64_t begin, end;
  };
  struct Entry {
    std::string name;
    std::vector<Segment> segments;
    int64_t zero_rows = 0;
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<MeshSpec> spec;
  };
  std::vector<Entry> entries;
  sdrt_state_dict_t sd = nullptr;
  // `bad_qkv_rows`: added to every qkv_proj buffer's rows (a layout no rule can fill).
  explicit VllmEngine(int64_t bad_qkv_rows = 0) {
    EXPECT_EQ(sdrt_state_dict_create(&sd), SDRT_OK);
    for (int l = 0; l < kLayers; ++l) {
      if (!LayerFits(l)) continue;
      for (const char* fused : {"self_attn.qkv_proj", "mlp.gate_up_proj"}) {
        Entry e;
        e.name = LayerName(l, fused);
        const bool qkv = fused[0] == 's';
        for (int p = qkv ? 0 : 3; p < (qkv ? 3 : 5); ++p) {
          const int t = HfIndex(LayerName(l, kProjections[p]));
          const auto [begin, end] = PartRows(HfTensors()[t].rows, qkv ? kHeadSize : 1);
          e.segments.push_back({t, begin, end});
        }
        Add(std::move(e), qkv ? bad_qkv_rows : 0);
      }
    }
    Entry embed;
    embed.name = "model.embed_tokens.weight";
    const auto [r0, r1] = Chunk(kPaddedVocab, g_size, g_rank);
    embed.segments.push_back({0, std::min(r0, kVocab), std::min(r1, kVocab)});
    embed.zero_rows = (r1 - r0) - (std::min(r1, kVocab) - std::min(r0, kVocab));
    Add(std::move(embed), 0, kPaddedVocab);
    Entry norm;
    norm.name = "model.norm.weight";
    norm.segments.push_back({HfIndex(norm.name), 0, 2});
    Add(std::move(norm), 0, -1, /*plain=*/true);
  }
  ~VllmEngine() { sdrt_state_dict_destroy(sd); }

  // `global_rows`: -1 for the local rows times the ranks.
  void Add(Entry e, int64_t extra_rows, int64_t global_rows = -1, bool plain = false) {
    int64_t rows = e.zero_rows + extra_rows;
    for (const Segment& s : e.segments) rows += s.end - s.begin;
    e.buffer = std::make_unique<Buffer>(rows, kCols, kCols);
    if (!plain) {
      e.spec = std::make_unique<MeshSpec>("S(0)", global_rows >= 0 ? global_rows : rows * g_size,
                                          kCols);
    }
    EXPECT_EQ(sdrt_state_dict_add(sd, e.name.c_str(), &e.buffer->dl,
                                  plain ? nullptr : &e.spec->spec),
              SDRT_OK)
        << sdrt_last_error();
    entries.push_back(std::move(e));
  }

  // Every row holds what its segment says, times `scale`; padding rows are zero.
  void ExpectLoaded(float scale = 1.0f) const {
    for (const Entry& e : entries) {
      int64_t row = 0;
      for (const Segment& s : e.segments) {
        for (int64_t i = s.begin; i < s.end; ++i, ++row) {
          for (int64_t j = 0; j < kCols; ++j) {
            ASSERT_EQ(e.buffer->at(row, j), scale * HfValue(s.tensor, i, j))
                << "rank " << g_rank << " " << e.name << " local row " << row << " ("
                << HfTensors()[s.tensor].name << " row " << i << ")";
          }
        }
      }
      for (int64_t k = 0; k < e.zero_rows; ++k, ++row) {
        for (int64_t j = 0; j < kCols; ++j) {
          ASSERT_EQ(e.buffer->at(row, j), 0.0f) << "rank " << g_rank << " " << e.name
                                                << " padding row " << row;
        }
      }
    }
  }
  void Scale(float scale) {
    for (Entry& e : entries) {
      for (float& x : e.buffer->data) x *= scale;
    }
  }
};

// A map handle from JSON text (nullptr, with the failure recorded, when refused).
sdrt_weight_map_t MapFromJson(const std::string& json) {
  sdrt_weight_map_t map = nullptr;
  EXPECT_EQ(sdrt_weight_map_from_json(json.data(), json.size(), &map), SDRT_OK)
      << sdrt_last_error();
  return map;
}

// The HF file into the vLLM engine's buffers with the built-in map: every rank's fused
// locals bit-exact, the padding zero, each rank reading only its own rows.
TEST(CApiWeightMap, LoadsAnHfFileIntoVllmBuffers) {
  sdrt_weight_map_t map = nullptr;
  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &map));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  for (const int32_t read : {SDRT_READ_AUTO, SDRT_READ_ALL}) {
    VllmEngine engine;
    sdrt_load_options_t o = LoadOptions();
    int64_t missing = -1;
    int64_t unexpected = -1;
    o.read = read;
    o.num_missing = &missing;
    o.num_unexpected = &unexpected;
    o.weight_map = map;
    ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
    engine.ExpectLoaded();
    EXPECT_EQ(missing, 0);
    int64_t left_out = 0;  // the projections of layers whose kv heads do not fit
    for (int l = 0; l < kLayers; ++l) left_out += LayerFits(l) ? 0 : 5;
    EXPECT_EQ(unexpected, left_out);
    sdrt_stats_t stats = SDRT_STATS_INIT;
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    int64_t kept = 0;
    for (const auto& e : engine.entries) {
      for (const auto& s : e.segments) kept += (s.end - s.begin) * kCols * 4;
    }
    EXPECT_EQ(stats.bytes_kept, kept);
    EXPECT_GE(stats.bytes_read, kept);
    // The buffers are the engine's own.
    for (size_t i = 0; i < engine.entries.size(); ++i) {
      const char* name = nullptr;
      const DLTensor* view = nullptr;
      ASSERT_SDRT_OK(sdrt_state_dict_get(engine.sd, static_cast<int64_t>(i), &name, &view,
                                         nullptr));
      EXPECT_EQ(view->data, engine.entries[i].buffer->data.data()) << name;
    }
  }
  // The options only borrowed the map: destroyed, a second load with a new one.
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &map));
  VllmEngine engine;
  sdrt_load_options_t o = LoadOptions();
  o.weight_map = map;
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  // ... but it must be live during the call: the same error on every rank, before any
  // collective.
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, engine.sd, &o),
                    "sdrt_load: options.weight_map is a weight map handle that was already "
                    "destroyed");
  sdrt_checkpoint_close(ckpt);
}

// The engine's fused buffers split back into HF tensors (replicated) by a JSON map with a
// rename, through a reshard plan: the map is destroyed right after the plan is made, and
// the plan is executed twice and bound.
TEST(CApiWeightMap, ReshardPlanSplitsAndRenamesWithoutItsMap) {
  VllmEngine engine;
  sdrt_weight_map_t load_map = nullptr;
  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &load_map));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  sdrt_load_options_t o = LoadOptions();
  o.weight_map = load_map;
  ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
  sdrt_checkpoint_close(ckpt);
  sdrt_weight_map_destroy(load_map);

  // The trainer's side: every HF projection of the layers the engine holds, whole on
  // every rank (Replicate), and the norm renamed, plain.
  struct Hf {
    int tensor;
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<MeshSpec> spec;
  };
  std::vector<Hf> hf;
  sdrt_state_dict_t trainer = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&trainer));
  for (int l = 0; l < kLayers; ++l) {
    if (!LayerFits(l)) continue;
    for (const char* p : kProjections) {
      Hf h;
      h.tensor = HfIndex(LayerName(l, p));
      const int64_t rows = HfTensors()[h.tensor].rows;
      h.buffer = std::make_unique<Buffer>(rows, kCols, kCols);
      h.spec = std::make_unique<MeshSpec>("R", rows, kCols);
      ASSERT_SDRT_OK(sdrt_state_dict_add(trainer, LayerName(l, p).c_str(), &h.buffer->dl,
                                         &h.spec->spec));
      hf.push_back(std::move(h));
    }
  }
  Buffer norm(2, kCols, kCols);
  ASSERT_SDRT_OK(sdrt_state_dict_add(trainer, "final_norm.weight", &norm.dl, nullptr));
  const auto expect_trainer = [&](float scale) {
    for (const Hf& h : hf) {
      for (int64_t i = 0; i < h.buffer->shape[0]; ++i) {
        for (int64_t j = 0; j < kCols; ++j) {
          ASSERT_EQ(h.buffer->at(i, j), scale * HfValue(h.tensor, i, j))
              << "rank " << g_rank << " " << HfTensors()[h.tensor].name << " [" << i << ", "
              << j << "]";
        }
      }
    }
    const int t = HfIndex("model.norm.weight");
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < kCols; ++j) ASSERT_EQ(norm.at(i, j), scale * HfValue(t, i, j));
    }
  };

  sdrt_weight_map_t split = MapFromJson(R"({"rules": [
    {"split": "model\\.layers\\.(\\d+)\\.self_attn\\.qkv_proj\\.weight",
     "to": ["model.layers.{1}.self_attn.q_proj.weight", "model.layers.{1}.self_attn.k_proj.weight",
            "model.layers.{1}.self_attn.v_proj.weight"], "head_size": 2},
    {"split": "model\\.layers\\.(\\d+)\\.mlp\\.gate_up_proj\\.weight",
     "to": ["model.layers.{1}.mlp.gate_proj.weight", "model.layers.{1}.mlp.up_proj.weight"]},
    {"rename": "model\\.norm\\.weight", "to": "final_norm.weight"}]})");
  ASSERT_NE(split, nullptr);
  sdrt_reshard_options_t options = SDRT_RESHARD_OPTIONS_INIT;
  options.comm = g_world;
  options.timeout_seconds = 60;
  options.bucket_bytes = 128;
  options.weight_map = split;
  sdrt_reshard_plan_t plan = nullptr;
  ASSERT_SDRT_OK(sdrt_reshard_plan_create(engine.sd, trainer, &options, &plan));
  // The plan keeps what it needs of the map.
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(split));
  ASSERT_SDRT_OK(sdrt_reshard_execute(plan, engine.sd, trainer, nullptr));
  expect_trainer(1.0f);
  engine.Scale(2.0f);
  ASSERT_SDRT_OK(sdrt_reshard_execute(plan, engine.sd, trainer, nullptr));
  expect_trainer(2.0f);
  sdrt_reshard_bound_t bound = nullptr;
  ASSERT_SDRT_OK(sdrt_reshard_bind(plan, engine.sd, trainer, nullptr, &bound));
  engine.Scale(1.5f);
  ASSERT_SDRT_OK(sdrt_reshard_bound_execute(bound, nullptr));
  expect_trainer(3.0f);
  ASSERT_SDRT_OK(sdrt_reshard_bound_destroy(bound));
  ASSERT_SDRT_OK(sdrt_reshard_plan_destroy(plan));

  // Without the map the trainer's names are not the engine's: nothing holds q_proj.
  sdrt_reshard_plan_t unmapped = nullptr;
  options.weight_map = nullptr;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT,
              sdrt_reshard_plan_create(engine.sd, trainer, &options, &unmapped));
  // A destroyed map, and a handle of another kind, refused on every rank.
  options.weight_map = split;
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_plan_create(engine.sd, trainer, &options, &unmapped),
                    "sdrt_reshard_plan_create: options.weight_map is a weight map handle that "
                    "was already destroyed");
  options.weight_map = reinterpret_cast<sdrt_weight_map_t>(trainer);
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_plan_create(engine.sd, trainer, &options, &unmapped),
                    "options.weight_map is a state dict handle, not a weight map");
  EXPECT_EQ(unmapped, nullptr);
  sdrt_state_dict_destroy(trainer);
}

// Maps that cannot be made, and loads whose map cannot hold: the rule is named, and a
// collective's error is every rank's.
TEST(CApiWeightMap, Errors) {
  sdrt_weight_map_t map = nullptr;
  // JSON that does not parse, a rule's pattern RE2 refuses, an unknown key, a split with
  // one template.
  const std::string garbage = R"({"rules": [)";
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_weight_map_from_json(garbage.data(), garbage.size(), &map),
                    "sdrt_weight_map_from_json: weight map: ");
  const std::pair<std::string, const char*> bad_rules[] = {
      {R"({"rules": [{"rename": "a", "to": "b"}, {"rename": "(", "to": "c"}]})",
       "weight map rule 1 (rename): pattern '('"},
      {R"({"rules": [{"rename": "a", "to": "b", "dimension": 0}]})", "weight map rule 0"},
      {R"({"rules": [{"split": "a", "to": ["b"]}]})", "weight map rule 0 (split)"},
      {R"({"rules": [{"rename": "a", "to": "{i}"}]})", "weight map rule 0 (rename)"},
  };
  for (const auto& [json, text] : bad_rules) {
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                      sdrt_weight_map_from_json(json.data(), json.size(), &map), text);
  }
  EXPECT_EQ(map, nullptr);
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_from_json(nullptr, 4, &map),
                    "json is NULL");
  const std::string fine = R"({"rules": []})";
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_weight_map_from_json(fine.data(), fine.size(), nullptr), "out is NULL");
  // Built-in maps: unknown names, bad head sizes, NULLs.
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin("vllm-mixtral", 8, &map),
                    "no built-in weight map 'vllm-mixtral'");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin("vllm-llama", -4, &map),
                    "head size -4");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin(nullptr, 8, &map),
                    "name is NULL");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin("vllm-llama", 8, nullptr),
                    "out is NULL");
  EXPECT_EQ(map, nullptr);
  // Destroyed: refused by a second destroy; of another kind, refused and not freed.
  ASSERT_SDRT_OK(sdrt_weight_map_from_json(fine.data(), fine.size(), &map));
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_destroy(map),
                    "sdrt_weight_map_destroy: map is a weight map handle that was already "
                    "destroyed");
  sdrt_state_dict_t sd = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&sd));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_weight_map_destroy(reinterpret_cast<sdrt_weight_map_t>(sd)),
                    "map is a state dict handle, not a weight map");
  ASSERT_SDRT_OK(sdrt_state_dict_destroy(sd));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_state_dict_destroy(reinterpret_cast<sdrt_state_dict_t>(map)),
                    "state_dict is a destroyed weight map handle, not a state dict");

  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &map));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  sdrt_load_options_t o = LoadOptions();
  o.weight_map = map;
  {
    // qkv_proj buffers one row too long: the fuse cannot fill them, on every rank.
    VllmEngine wrong(/*bad_qkv_rows=*/1);
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, wrong.sd, &o),
                      "weight map rule 0 (fuse)");
    EXPECT_NE(std::strstr(sdrt_last_error(), "qkv_proj"), nullptr) << sdrt_last_error();
  }
  VllmEngine engine;
  // read ROOT: every rank must read the header to lower its buffers.
  o.read = SDRT_READ_ROOT;
  EXPECT_SDRT_ERROR(SDRT_UNIMPLEMENTED, sdrt_load(ckpt, engine.sd, &o), "weight map");
  o.read = SDRT_READ_AUTO;
  // Ranks passing different maps (another head size): the same error on every rank.
  if (g_size > 1) {
    sdrt_weight_map_t other = nullptr;
    ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", 2 * kHeadSize, &other));
    o.weight_map = g_rank == 0 ? other : map;
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, engine.sd, &o), "weight map");
    o.weight_map = map;
    ASSERT_SDRT_OK(sdrt_weight_map_destroy(other));
  }
  // The same engine loads once the options are right.
  ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
  engine.ExpectLoaded();
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  sdrt_checkpoint_close(ckpt);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sdrt_comm_options_t options = SDRT_COMM_OPTIONS_INIT;
  options.timeout_seconds = 60;
  if (sdrt_comm_create_world(&options, &g_world) != SDRT_OK) {
    std::fprintf(stderr, "sdrt_comm_create_world: %s\n", sdrt_last_error());
    return 1;
  }
  sdrt_comm_rank(g_world, &g_rank);
  sdrt_comm_size(g_world, &g_size);
  if (g_rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  char dir[4096] = {0};
  if (g_rank == 0) {
    const char* base = std::getenv("SDRT_TEST_TMP");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sdrt_c_api_XXXXXX";
    std::snprintf(dir, sizeof dir, "%s", pattern.c_str());
    if (mkdtemp(dir) == nullptr) dir[0] = 0;
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  g_dir = dir;
  WriteCheckpoint();
  WriteLlamaCheckpoint();
  MPI_Barrier(MPI_COMM_WORLD);
  const int result = RUN_ALL_TESTS();
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::string rm = "rm -rf '" + g_dir + "'";
    if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", g_dir.c_str());
  }
  sdrt_comm_destroy(g_world);
  // A failure on any rank fails the run.
  int worst = result;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
