/* An inference engine written in C loads a checkpoint into its own weight buffers,
 * tensor-parallel over the ranks of mpiexec, through sdrt's C API (sdrt/c_api.h).
 *
 * The engine owns its memory: it asks sdrt where each weight's slice on this rank lies
 * (sdrt_compute_local_shape_and_global_offset, PyTorch's compute_local_shape_and_global_offset),
 * allocates a buffer of exactly that size (cudaMalloc on a GPU when built with CUDA and one
 * is there, else malloc) and hands it to sdrt as a borrowed DLPack tensor with the slice's
 * placement on a 1-D device mesh. One sdrt_load call fills every buffer in place; each rank
 * reads only its own slices' bytes from the files (no rank funnels the others).
 *
 * The layout is Megatron-style tensor parallelism by name, sdrt's built-in "tp" plan: the
 * output projections of attention and the MLP (o_proj, down_proj, attention.output.dense,
 * output.dense) are row-parallel, Shard(1); the other projections, embeddings and lm_head
 * are column-parallel, Shard(0); norms are replicated. Slices are cut as PyTorch cuts them:
 * ceil(n / ranks) per rank, the last ones shorter or empty.
 *
 * To check, every rank then loads up to three of the matrices whole (a plain entry, no
 * communication) and compares its slices with the rows or columns they must hold.
 *
 * Run: mpiexec -n 2 engine CHECKPOINT   (a .safetensors file or a Hugging Face folder)
 * Exit: 0 when every check passes, 1 when one fails, 2 for bad arguments. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdrt/c_api.h"

#if ENGINE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

enum { kMaxWeights = 4096, kChecked = 3 };

typedef struct {
  char name[256];
  DLTensor tensor; /* the engine's buffer: data it malloc'd, its local shape */
  int64_t local_shape[2];
  int64_t global_shape[2];
  int64_t offset[2]; /* the global index of the slice's first element, per dim */
  int32_t ndim;
  char placements[32]; /* "[S(0)]", "[S(1)]", "[R]" */
  size_t elem;         /* bytes per element */
} Weight;

static Weight weights[kMaxWeights];

/* The engine's weight memory: cudaMalloc on GPU rank % devices when the program was built
 * with CUDA and a device is there, else malloc. */
static int on_cuda = 0;

static void PickMemory(int rank) {
#if ENGINE_WITH_CUDA
  int devices = 0;
  on_cuda = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 &&
            cudaSetDevice(rank % devices) == cudaSuccess;
#else
  (void)rank;
#endif
}

static void* EngineAlloc(size_t bytes) {
#if ENGINE_WITH_CUDA
  if (on_cuda) {
    void* p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
  }
#endif
  return malloc(bytes);
}

static void EngineFree(void* p) {
#if ENGINE_WITH_CUDA
  if (on_cuda) {
    cudaFree(p);
    return;
  }
#endif
  free(p);
}

/* A host copy of the engine's buffer (the buffer itself on the CPU); free with HostDone. */
static const unsigned char* HostView(const void* data, size_t bytes) {
#if ENGINE_WITH_CUDA
  if (on_cuda) {
    void* host = malloc(bytes > 0 ? bytes : 1);
    if (host != NULL && cudaMemcpy(host, data, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
      free(host);
      host = NULL;
    }
    return (const unsigned char*)host;
  }
#else
  (void)bytes;
#endif
  return (const unsigned char*)data;
}

static void HostDone(const unsigned char* view) {
  if (on_cuda) free((void*)view);
}

static int Check(sdrt_status_t status, const char* what) {
  if (status == SDRT_OK) return 0;
  fprintf(stderr, "engine: %s: %s: %s\n", what, sdrt_status_string(status), sdrt_last_error());
  exit(1);
}

/* Compares matrix w's slice, the box at w->offset of w->local_shape, with the whole
 * tensor `full` (row-major, same dtype), row by row. */
static int SliceMatches(const Weight* w, const unsigned char* full) {
  const int64_t cols = w->global_shape[1];
  const size_t row_bytes = (size_t)w->local_shape[1] * w->elem;
  const unsigned char* mine = HostView(w->tensor.data, (size_t)w->local_shape[0] * row_bytes);
  int same = mine != NULL;
  for (int64_t r = 0; same && r < w->local_shape[0]; ++r) {
    same =
        memcmp(mine + (size_t)r * row_bytes,
               full + (size_t)((w->offset[0] + r) * cols + w->offset[1]) * w->elem, row_bytes) == 0;
  }
  if (mine != NULL) HostDone(mine);
  return same;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: mpiexec -n N engine CHECKPOINT\n");
    return 2;
  }
  if (sdrt_get_abi_version() != SDRT_C_ABI_VERSION) {
    fprintf(stderr, "engine: built against sdrt ABI %d, running with %d\n", SDRT_C_ABI_VERSION,
            sdrt_get_abi_version());
    return 1;
  }
  sdrt_comm_options_t comm_options = SDRT_COMM_OPTIONS_INIT;
  comm_options.timeout_seconds = 120;
  sdrt_comm_t comm = NULL;
  Check(sdrt_comm_create_world(&comm_options, &comm), "sdrt_comm_create_world");
  int rank = 0, ranks = 1;
  Check(sdrt_comm_rank(comm, &rank), "sdrt_comm_rank");
  Check(sdrt_comm_size(comm, &ranks), "sdrt_comm_size");
  PickMemory(rank);

  sdrt_checkpoint_t checkpoint = NULL;
  if (sdrt_checkpoint_open(argv[1], &checkpoint) != SDRT_OK) {
    fprintf(stderr, "engine: %s\n", sdrt_last_error());
    sdrt_comm_destroy(comm);
    return 2;
  }
  int64_t count = 0;
  Check(sdrt_checkpoint_num_tensors(checkpoint, &count), "sdrt_checkpoint_num_tensors");

  /* The engine's buffers and their layout. */
  sdrt_state_dict_t engine = NULL;
  Check(sdrt_state_dict_create(&engine), "sdrt_state_dict_create");
  const int64_t mesh_shape[1] = {ranks};
  int64_t loaded = 0, local_bytes = 0, total_bytes = 0;
  for (int64_t i = 0; i < count && loaded < kMaxWeights; ++i) {
    sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
    Check(sdrt_checkpoint_tensor_info(checkpoint, i, &info), "sdrt_checkpoint_tensor_info");
    if (info.ndim < 1 || info.ndim > 2 || info.dtype.bits % 8 != 0 ||
        strlen(info.name) >= sizeof weights[0].name) {
      continue; /* this engine keeps vectors and matrices of whole-byte dtypes */
    }
    Weight* w = &weights[loaded];
    snprintf(w->name, sizeof w->name, "%s", info.name);
    w->ndim = info.ndim;
    w->elem = info.dtype.bits / 8;
    for (int d = 0; d < info.ndim; ++d) w->global_shape[d] = info.shape[d];
    /* This rank's slice under the tp plan: its placements, shape and offset. */
    sdrt_dtensor_spec_t spec = SDRT_DTENSOR_SPEC_INIT;
    spec.mesh_ndim = 1;
    spec.mesh_shape = mesh_shape;
    spec.global_ndim = info.ndim;
    spec.global_shape = w->global_shape;
    sdrt_local_shard_t slice = SDRT_LOCAL_SHARD_INIT;
    Check(sdrt_compute_local_shape_and_global_offset(&spec, "tp", w->name, rank, &slice),
          "sdrt_compute_local_shape_and_global_offset");
    snprintf(w->placements, sizeof w->placements, "%s", slice.placements);
    int64_t numel = 1;
    for (int d = 0; d < info.ndim; ++d) {
      w->local_shape[d] = slice.local_shape[d];
      w->offset[d] = slice.global_offset[d];
      numel *= w->local_shape[d];
    }
    w->tensor.data = numel > 0 ? EngineAlloc((size_t)numel * w->elem) : NULL;
    if (numel > 0 && w->tensor.data == NULL) {
      fprintf(stderr, "engine: out of memory\n");
      return 1;
    }
    w->tensor.device.device_type = on_cuda ? kDLCUDA : kDLCPU;
    w->tensor.device.device_id = 0;
#if ENGINE_WITH_CUDA
    if (on_cuda) cudaGetDevice(&w->tensor.device.device_id);
#endif
    w->tensor.ndim = info.ndim;
    w->tensor.dtype = info.dtype;
    w->tensor.shape = w->local_shape;
    w->tensor.strides = NULL; /* row-major */
    spec.placements = w->placements;
    Check(sdrt_state_dict_add(engine, w->name, &w->tensor, &spec), "sdrt_state_dict_add");
    local_bytes += numel * (int64_t)w->elem;
    total_bytes += info.nbytes;
    ++loaded;
  }

  /* One collective call: every rank reads its own slices into its own buffers (read AUTO,
   * the default: when every rank sees the same files; else rank 0 reads and broadcasts). */
  sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
  load.comm = comm;
  Check(sdrt_load(checkpoint, engine, &load), "sdrt_load");
  sdrt_stats_t stats = SDRT_STATS_INIT;
  Check(sdrt_get_last_stats(&stats), "sdrt_get_last_stats");

  /* The check: a few matrices read whole (no communication), compared slice by slice. */
  sdrt_state_dict_t whole = NULL;
  Check(sdrt_state_dict_create(&whole), "sdrt_state_dict_create");
  void* full[kChecked] = {NULL};
  const Weight* checked[kChecked] = {NULL};
  DLTensor full_tensor[kChecked];
  int num_checked = 0;
  for (int64_t i = 0; i < loaded && num_checked < kChecked; ++i) {
    const Weight* w = &weights[i];
    if (w->ndim != 2) continue;
    full[num_checked] = malloc((size_t)(w->global_shape[0] * w->global_shape[1]) * w->elem);
    if (full[num_checked] == NULL) return 1;
    full_tensor[num_checked] = w->tensor;
    full_tensor[num_checked].data = full[num_checked];
    full_tensor[num_checked].device.device_type = kDLCPU;
    full_tensor[num_checked].device.device_id = 0;
    full_tensor[num_checked].shape = (int64_t*)w->global_shape;
    Check(sdrt_state_dict_add(whole, w->name, &full_tensor[num_checked], NULL),
          "sdrt_state_dict_add");
    checked[num_checked++] = w;
  }
  sdrt_load_options_t alone = SDRT_LOAD_OPTIONS_INIT;
  alone.rank = rank;
  Check(sdrt_load(checkpoint, whole, &alone), "sdrt_load (whole)");
  int wrong = 0;
  for (int k = 0; k < num_checked; ++k) {
    if (!SliceMatches(checked[k], (const unsigned char*)full[k])) {
      fprintf(stderr, "engine: rank %d: %s differs from the file\n", rank, checked[k]->name);
      ++wrong;
    }
  }
  if (rank == 0) {
    printf("engine: tp=%d (%s memory), rank 0 holds %" PRId64 " of %" PRId64 " bytes of %" PRId64
           " weights, read %" PRId64 " bytes in %.3f s\n",
           ranks, on_cuda ? "CUDA" : "host", local_bytes, total_bytes, loaded, stats.bytes_read,
           stats.seconds);
    for (int k = 0; k < num_checked; ++k) {
      const Weight* w = checked[k];
      printf("engine: %s [%" PRId64 ", %" PRId64 "] %s, rank 0's slice [%" PRId64 ", %" PRId64
             "]: %s\n",
             w->name, w->global_shape[0], w->global_shape[1], w->placements, w->local_shape[0],
             w->local_shape[1], wrong ? "DIFFERS" : "matches the file");
    }
  }
  for (int k = 0; k < num_checked; ++k) free(full[k]);
  sdrt_state_dict_destroy(whole);
  sdrt_state_dict_destroy(engine);
  for (int64_t i = 0; i < loaded; ++i) {
    if (weights[i].tensor.data != NULL) EngineFree(weights[i].tensor.data);
  }
  sdrt_checkpoint_close(checkpoint);
  sdrt_comm_destroy(comm);
  return wrong == 0 ? 0 : 1;
}
