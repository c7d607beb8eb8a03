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
 * Given a Hugging Face folder whose config.json gives the attention head size (head_dim, or
 * hidden_size / num_attention_heads), the engine serves a Llama as vLLM lays it out (fused.c:
 * fused qkv_proj and gate_up_proj buffers, a padded vocabulary). sdrt's built-in weight map
 * "vllm-llama" tells the same sdrt_load how the checkpoint's tensors make these buffers; each
 * rank still reads only its own rows, straight into its buffers.
 *
 * To check, every rank then loads a few of the matrices whole (a plain entry, no
 * communication) and compares its slices, and its fused buffers, with the rows they must
 * hold.
 *
 * Run: mpiexec -n 2 engine CHECKPOINT   (a .safetensors file or a Hugging Face folder)
 * Exit: 0 when every check passes, 1 when one fails, 2 for bad arguments. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused.h"
#include "sdrt/c_api.h"

#if ENGINE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

enum { kMaxWeights = 4096, kMaxFused = 512, kChecked = 3, kCheckedFused = 2, kMaxWhole = 16 };

typedef struct {
  char name[256];
  DLTensor tensor; /* the engine's buffer: data it malloc'd, its local shape */
  int64_t local_shape[2];
  int64_t global_shape[2]; /* the buffer's: padded rows included */
  int64_t file_rows;       /* rows in the checkpoint (fewer when padded) */
  int64_t offset[2]; /* the global index of the slice's first element, per dim */
  int32_t ndim;
  char placements[32]; /* "[S(0)]", "[S(1)]", "[R]" */
  size_t elem;         /* bytes per element */
} Weight;

static Weight weights[kMaxWeights];
static Fused fused[kMaxFused];

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
const unsigned char* HostView(const void* data, size_t bytes) {
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

void HostDone(const unsigned char* view) {
  if (on_cuda) free((void*)view);
}

/* A failed call ends the engine: exit 2 for what the checkpoint or the rank count makes
 * impossible (bad input, as sdrt's own tool), 1 for a runtime failure. */
int Check(sdrt_status_t status, const char* what) {
  if (status == SDRT_OK) return 0;
  fprintf(stderr, "engine: %s: %s: %s\n", what, sdrt_status_string(status), sdrt_last_error());
  exit(status == SDRT_INVALID_ARGUMENT ? 2 : 1);
}

/* A buffer of the engine's own memory described as a row-major DLTensor. */
void* AllocTensor(DLTensor* t, int32_t ndim, int64_t* shape, DLDataType dtype, size_t elem) {
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) numel *= shape[d];
  memset(t, 0, sizeof *t);
  t->data = numel > 0 ? EngineAlloc((size_t)numel * elem) : NULL;
  if (numel > 0 && t->data == NULL) {
    fprintf(stderr, "engine: out of memory\n");
    exit(1);
  }
  t->device.device_type = on_cuda ? kDLCUDA : kDLCPU;
#if ENGINE_WITH_CUDA
  if (on_cuda) cudaGetDevice(&t->device.device_id);
#endif
  t->ndim = ndim;
  t->dtype = dtype;
  t->shape = shape;
  t->strides = NULL; /* row-major */
  return t->data;
}

/* ------------------------------------------------------------------------------------------
 * The check: matrices read whole (no communication) compared with the engine's buffers
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  int64_t shape[2];
  DLTensor tensor;
} Whole;
static Whole wholes[kMaxWhole];
static int num_wholes = 0;

/* A malloc'd plain entry for the checkpoint matrix `name`, filled by the next load. */
const unsigned char* AddWhole(sdrt_state_dict_t whole, const char* name, DLDataType dtype,
                              int64_t rows, int64_t cols) {
  Whole* h = &wholes[num_wholes++];
  h->shape[0] = rows;
  h->shape[1] = cols;
  memset(&h->tensor, 0, sizeof h->tensor);
  h->tensor.data = malloc((size_t)(rows * cols) * (dtype.bits / 8) + 1);
  if (h->tensor.data == NULL) exit(1);
  h->tensor.device.device_type = kDLCPU;
  h->tensor.ndim = 2;
  h->tensor.dtype = dtype;
  h->tensor.shape = h->shape;
  Check(sdrt_state_dict_add(whole, name, &h->tensor, NULL), "sdrt_state_dict_add");
  return (const unsigned char*)h->tensor.data;
}

/* Compares matrix w's slice, the box at w->offset of w->local_shape, with the whole
 * tensor `full` (row-major, same dtype), row by row; padded rows must be zero. */
static int SliceMatches(const Weight* w, const unsigned char* full) {
  const int64_t cols = w->global_shape[1];
  const size_t row_bytes = (size_t)w->local_shape[1] * w->elem;
  const unsigned char* mine = HostView(w->tensor.data, (size_t)w->local_shape[0] * row_bytes);
  int same = mine != NULL;
  for (int64_t r = 0; same && r < w->local_shape[0]; ++r) {
    const unsigned char* row = mine + (size_t)r * row_bytes;
    if (w->offset[0] + r < w->file_rows) {
      same = memcmp(row, full + (size_t)((w->offset[0] + r) * cols + w->offset[1]) * w->elem,
                    row_bytes) == 0;
    } else {
      for (size_t b = 0; same && b < row_bytes; ++b) same = row[b] == 0;
    }
  }
  if (mine != NULL) HostDone(mine);
  return same;
}

int main(int argc, char** argv) {
  if (argc != 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fprintf(argc == 2 ? stdout : stderr,
            "usage: mpiexec -n N engine CHECKPOINT (a safetensors file, a Hugging Face folder "
            "or an sdrt sharded folder)\n");
    return argc == 2 ? 0 : 2;
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
  /* > 0: a folder with config.json, served vLLM-style. */
  const int64_t head_size = HeadSize(argv[1]);

  /* The engine's buffers and their layout. */
  sdrt_state_dict_t engine = NULL;
  Check(sdrt_state_dict_create(&engine), "sdrt_state_dict_create");
  const int64_t mesh_shape[1] = {ranks};
  int64_t loaded = 0, num_fused = 0, local_bytes = 0, total_bytes = 0;
  for (int64_t i = 0; i < count && loaded < kMaxWeights && num_fused < kMaxFused; ++i) {
    sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
    Check(sdrt_checkpoint_tensor_info(checkpoint, i, &info), "sdrt_checkpoint_tensor_info");
    if (info.ndim < 1 || info.ndim > 2 || info.dtype.bits % 8 != 0 ||
        strlen(info.name) >= sizeof weights[0].name) {
      continue; /* this engine keeps vectors and matrices of whole-byte dtypes */
    }
    total_bytes += info.nbytes;
    const int role = head_size > 0 ? FusedRole(info.name) : 0;
    if (role > 0) {
      /* vLLM: q, k, v into qkv_proj and gate, up into gate_up_proj (made at q and gate). */
      if (role == 2) {
        Fused* f = &fused[num_fused++];
        AddFused(f, checkpoint, count, i, info.name, head_size, rank, ranks, engine);
        local_bytes += f->local_shape[0] * f->local_shape[1] * (int64_t)f->elem;
      }
      continue;
    }
    Weight* w = &weights[loaded];
    snprintf(w->name, sizeof w->name, "%s", info.name);
    w->ndim = info.ndim;
    w->elem = info.dtype.bits / 8;
    for (int d = 0; d < info.ndim; ++d) w->global_shape[d] = info.shape[d];
    w->file_rows = info.shape[0];
    if (head_size > 0) w->global_shape[0] = VllmRows(w->name, w->file_rows);
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
    AllocTensor(&w->tensor, info.ndim, w->local_shape, info.dtype, w->elem);
    spec.placements = w->placements;
    Check(sdrt_state_dict_add(engine, w->name, &w->tensor, &spec), "sdrt_state_dict_add");
    local_bytes += numel * (int64_t)w->elem;
    ++loaded;
  }

  /* One collective call: every rank reads its own slices into its own buffers (read AUTO,
   * the default: when every rank sees the same files; else rank 0 reads and broadcasts).
   * vLLM-style, the built-in map says how the checkpoint's tensors make the fused and padded
   * buffers (every rank must then see the files); the load only borrows it. */
  sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
  load.comm = comm;
  if (head_size > 0) {
    Check(sdrt_weight_map_builtin("vllm-llama", head_size, &load.weight_map),
          "sdrt_weight_map_builtin");
  }
  Check(sdrt_load(checkpoint, engine, &load), "sdrt_load");
  sdrt_stats_t stats = SDRT_STATS_INIT;
  Check(sdrt_get_last_stats(&stats), "sdrt_get_last_stats");
  Check(sdrt_weight_map_destroy(load.weight_map), "sdrt_weight_map_destroy");

  /* The check: a few matrices and the components of the first fused buffers read whole (no
   * communication), compared slice by slice and row by row. */
  sdrt_state_dict_t whole = NULL;
  Check(sdrt_state_dict_create(&whole), "sdrt_state_dict_create");
  const Weight* checked[kChecked] = {NULL};
  const unsigned char* full[kChecked] = {NULL};
  const unsigned char* components[kCheckedFused][3] = {{NULL}};
  int num_checked = 0;
  for (int64_t i = 0; i < loaded && num_checked < kChecked; ++i) {
    const Weight* w = &weights[i];
    if (w->ndim != 2) continue;
    full[num_checked] = AddWhole(whole, w->name, w->tensor.dtype, w->file_rows,
                                 w->global_shape[1]);
    checked[num_checked++] = w;
  }
  const int num_checked_fused = num_fused < kCheckedFused ? (int)num_fused : kCheckedFused;
  for (int k = 0; k < num_checked_fused; ++k) AddFusedWholes(&fused[k], whole, components[k]);
  sdrt_load_options_t alone = SDRT_LOAD_OPTIONS_INIT;
  alone.rank = rank;
  /* A sharded folder's pieces are in every rank's files: the whole matrices come together
   * over the communicator (every rank asks for the same ones). */
  sdrt_checkpoint_kind_t kind = SDRT_CHECKPOINT_SAFETENSORS_FILE;
  Check(sdrt_checkpoint_kind(checkpoint, &kind), "sdrt_checkpoint_kind");
  if (kind == SDRT_CHECKPOINT_SHARDED_FOLDER) alone.comm = comm;
  Check(sdrt_load(checkpoint, whole, &alone), "sdrt_load (whole)");
  int wrong = 0;
  for (int k = 0; k < num_checked; ++k) {
    if (!SliceMatches(checked[k], full[k])) {
      fprintf(stderr, "engine: rank %d: %s differs from the file\n", rank, checked[k]->name);
      ++wrong;
    }
  }
  for (int k = 0; k < num_checked_fused; ++k) {
    if (!FusedMatches(&fused[k], components[k])) {
      fprintf(stderr, "engine: rank %d: %s differs from the file\n", rank, fused[k].name);
      ++wrong;
    }
  }
  if (rank == 0) {
    printf("engine: tp=%d (%s memory%s), rank 0's buffers: %" PRId64 " bytes of %" PRId64
           " weights (the checkpoint: %" PRId64 "), read %" PRId64 " bytes in %.3f s\n",
           ranks, on_cuda ? "CUDA" : "host", head_size > 0 ? ", vLLM layout" : "", local_bytes,
           loaded + num_fused, total_bytes, stats.bytes_read, stats.seconds);
    for (int k = 0; k < num_checked; ++k) {
      const Weight* w = checked[k];
      printf("engine: %s [%" PRId64 ", %" PRId64 "] %s, rank 0's slice [%" PRId64 ", %" PRId64
             "]: %s\n",
             w->name, w->global_shape[0], w->global_shape[1], w->placements, w->local_shape[0],
             w->local_shape[1], wrong ? "DIFFERS" : "matches the file");
    }
    for (int k = 0; k < num_checked_fused; ++k) {
      PrintFused(&fused[k], wrong ? "DIFFERS" : "matches the file");
    }
  }
  for (int k = 0; k < num_wholes; ++k) free(wholes[k].tensor.data);
  sdrt_state_dict_destroy(whole);
  sdrt_state_dict_destroy(engine);
  for (int64_t i = 0; i < loaded; ++i) {
    if (weights[i].tensor.data != NULL) EngineFree(weights[i].tensor.data);
  }
  for (int64_t i = 0; i < num_fused; ++i) {
    if (fused[i].tensor.data != NULL) EngineFree(fused[i].tensor.data);
  }
  sdrt_checkpoint_close(checkpoint);
  sdrt_comm_destroy(comm);
  return wrong == 0 ? 0 : 1;
}
