// An engine that loads a checkpoint into a pipelined layout through the C API (included
// here from C++), under mpiexec -n 1 to 4: sdrt_parallel_layout_place gives every tensor
// its stage's mesh ("megatron:pp=N", tp 2 x pp 2 on 4 ranks), each rank adds only the
// tensors whose mesh holds it, in malloc'd buffers of its local shape, and sdrt_load over
// the world fills them with read ALL: every element is the file's at the piece's global
// offset, and the ranks' lists differ. Reading once per host (share_reads) refuses such
// meshes, the same error on every rank. The file is c_api_llama_util.h's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/c_api.h"
#include "sdrt/tests/c_api/c_api_llama_util.h"
#include "sdrt/tests/c_api/c_api_test_util.h"

namespace {

using sdrt::testing_c_api::Buffer;
using sdrt::testing_c_api::g_rank;
using sdrt::testing_c_api::g_size;
using sdrt::testing_c_api::HfTensors;
using sdrt::testing_c_api::HfValue;
using sdrt::testing_c_api::kCols;
using sdrt::testing_c_api::LlamaPath;
using sdrt::testing_c_api::LoadOptions;

// This rank's part of the file's model under `description`: the tensors whose stage's mesh
// holds it, each in a buffer of its local shape with its global offset.
struct StageEngine {
  struct Held {
    int tensor;        // index into HfTensors()
    int64_t row, col;  // the piece's global offset
    std::unique_ptr<Buffer> buffer;
  };
  std::vector<Held> held;
  sdrt_state_dict_t sd = nullptr;

  explicit StageEngine(const std::string& description) {
    const std::vector<sdrt::testing_c_api::HfTensor>& tensors = HfTensors();
    const size_t n = tensors.size();
    std::vector<const char*> names(n);
    std::vector<int32_t> ndims(n, 2);
    shapes_.resize(n);
    std::vector<const int64_t*> shape_ptrs(n);
    std::vector<sdrt_dtensor_spec_t> specs(n, sdrt_dtensor_spec_t(SDRT_DTENSOR_SPEC_INIT));
    for (size_t t = 0; t < n; ++t) {
      names[t] = tensors[t].name.c_str();
      shapes_[t] = {tensors[t].rows, kCols};
      shape_ptrs[t] = shapes_[t].data();
    }
    EXPECT_EQ(sdrt_state_dict_create(&sd), SDRT_OK) << sdrt_last_error();
    EXPECT_EQ(
        sdrt_parallel_layout_place(description.c_str(), g_size, 0, static_cast<int64_t>(n),
                                   names.data(), ndims.data(), shape_ptrs.data(), specs.data()),
        SDRT_OK)
        << sdrt_last_error();
    for (size_t t = 0; t < n; ++t) {
      const sdrt_dtensor_spec_t& spec = specs[t];
      int64_t mesh_size = 1;
      for (int32_t d = 0; d < spec.mesh_ndim; ++d) mesh_size *= spec.mesh_shape[d];
      bool holds = false;
      for (int64_t k = 0; k < mesh_size; ++k) holds = holds || spec.mesh_ranks[k] == g_rank;
      if (!holds) continue;
      sdrt_local_shard_t piece = SDRT_LOCAL_SHARD_INIT;
      EXPECT_EQ(sdrt_compute_local_shape_and_global_offset(&spec, nullptr, nullptr, g_rank, &piece),
                SDRT_OK)
          << sdrt_last_error();
      Held h{static_cast<int>(t), piece.global_offset[0], piece.global_offset[1],
             std::make_unique<Buffer>(piece.local_shape[0], piece.local_shape[1],
                                      piece.local_shape[1])};
      EXPECT_EQ(sdrt_state_dict_add(sd, names[t], &h.buffer->dl, &spec), SDRT_OK)
          << sdrt_last_error();
      held.push_back(std::move(h));
    }
  }
  ~StageEngine() { sdrt_state_dict_destroy(sd); }

  // Every element of every held piece is the file's at its global index.
  void ExpectLoaded() const {
    for (const Held& h : held) {
      for (int64_t i = 0; i < h.buffer->shape[0]; ++i) {
        for (int64_t j = 0; j < h.buffer->shape[1]; ++j) {
          ASSERT_EQ(h.buffer->at(i, j), HfValue(h.tensor, h.row + i, h.col + j))
              << HfTensors()[h.tensor].name << " [" << i << ", " << j << "]";
        }
      }
    }
  }

 private:
  std::vector<std::vector<int64_t>> shapes_;
};

std::string Description() {
  return g_size == 4 ? "megatron:tp=2,pp=2" : "megatron:pp=" + std::to_string(g_size);
}

TEST(CApiParallelLayoutLoad, EachStageLoadsItsOwnTensors) {
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  StageEngine engine(Description());
  ASSERT_FALSE(engine.held.empty());
  if (g_size > 1) {
    EXPECT_LT(engine.held.size(), HfTensors().size());
  }
  sdrt_load_options_t o = LoadOptions();
  o.read = SDRT_READ_ALL;
  int64_t missing = -1;
  o.num_missing = &missing;
  ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
  engine.ExpectLoaded();
  EXPECT_EQ(missing, 0);
  if (g_size > 1) {
    StageEngine shared(Description());
    o.share_reads = 1;
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, shared.sd, &o),
                      "is not on a mesh of the communicator's");
  }
  sdrt_checkpoint_close(ckpt);
}

}  // namespace

int main(int argc, char** argv) {
  return sdrt::testing_c_api::RunCApiMpiTests(argc, argv,
                                              sdrt::testing_c_api::WriteLlamaCheckpoint);
}
