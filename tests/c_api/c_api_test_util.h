// Helpers of the multi-rank C API tests (c_api_mpi_test.cc, c_api_weight_map_mpi_test.cc),
// which call sdrt/c_api.h from C++: the world communicator and this rank, a folder the ranks
// share, assertions on a call's status code and last error, torch.chunk's cut, malloc'd
// float buffers seen as DLTensors, DTensor specs on a 1-D mesh over every rank, collective
// load options, and the main() that runs the tests under mpiexec. Test code only.
#ifndef SDRT_TESTS_C_API_C_API_TEST_UTIL_H_
#define SDRT_TESTS_C_API_C_API_TEST_UTIL_H_

#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/c_api.h"

#define ASSERT_SDRT_OK(call) ASSERT_EQ((call), SDRT_OK) << sdrt_last_error()
#define EXPECT_SDRT(code, call) EXPECT_EQ((call), (code)) << sdrt_last_error()
// The call returns `code` and its last error contains `text`.
#define EXPECT_SDRT_ERROR(code, call, text)                                          \
  do {                                                                               \
    EXPECT_EQ((call), (code)) << sdrt_last_error();                                  \
    EXPECT_NE(std::strstr(sdrt_last_error(), (text)), nullptr) << sdrt_last_error(); \
  } while (false)

namespace sdrt {
namespace testing_c_api {

inline sdrt_comm_t g_world = nullptr;
inline int g_rank = 0;
inline int g_size = 1;
inline std::string g_dir;  // a folder shared by the ranks, made by rank 0

// torch.chunk's cut of n along `parts`: rank r's [begin, end).
inline std::pair<int64_t, int64_t> Chunk(int64_t n, int parts, int r) {
  const int64_t chunk = (n + parts - 1) / parts;
  const int64_t begin = std::min(n, chunk * r);
  return {begin, std::min(n, begin + chunk)};
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

// Collective load options over the world (a static: the calls take its address).
inline const sdrt_load_options_t* LoadOptionsPtr() {
  static sdrt_load_options_t o = SDRT_LOAD_OPTIONS_INIT;
  o = SDRT_LOAD_OPTIONS_INIT;
  o.comm = g_world;
  o.timeout_seconds = 60;
  return &o;
}
inline sdrt_load_options_t LoadOptions() { return *LoadOptionsPtr(); }

// The body of a test binary's main(): the world from sdrt_comm_create_world (which
// initializes MPI), g_rank and g_size; only rank 0 prints the results; g_dir made by rank 0
// under $SDRT_TEST_TMP (else /tmp), into which rank 0 writes the binary's files
// (`write_files`, called on every rank) before the tests run, and removed after them. A
// failure on any rank fails the run.
inline int RunCApiMpiTests(int argc, char** argv, void (*write_files)()) {
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
  write_files();
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

}  // namespace testing_c_api
}  // namespace sdrt

#endif  // SDRT_TESTS_C_API_C_API_TEST_UTIL_H_
