/* sdrt/c_api.h compiled as C11 (-Wall -Wextra -Werror -pedantic, this header alone), and a
 * small single-process run of the local calls: versions, status strings, the last error,
 * struct_size checks, NULL handles, a state dict of malloc'd buffers and its offload, and
 * the calls that need no communicator in every build (no MPI or NCCL needed): sdrt_load and
 * sdrt_distribute with comm NULL, and where a rank's piece lies
 * (sdrt_compute_local_shape_and_global_offset) under placements and under a plan; weight
 * maps (made, refused, destroyed, and one renaming a tensor for a load); and calls from an
 * atexit handler, which glibc runs after the thread's thread_local destructors.
 * Usage: c_api_header_c FILE (a safetensors file it writes). Exit status 0 when every check
 * holds; each failure prints its line. */
#include "sdrt/c_api.h"
#include "sdrt/tests/c_api/c_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes `path`: a safetensors file of one float32 tensor "w" of shape {4, 3} holding
 * `values` (12 floats; the header length is little-endian, as the host's floats are). */
static int WriteFile(const char* path, const float* values) {
  static const char header[] =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]}}";
  unsigned char length[8] = {0};
  size_t n = sizeof header - 1;
  int i;
  FILE* f = fopen(path, "wb");
  if (f == NULL) return 0;
  for (i = 0; i < 8; ++i, n >>= 8) length[i] = (unsigned char)(n & 0xff);
  fwrite(length, 1, sizeof length, f);
  fwrite(header, 1, sizeof header - 1, f);
  fwrite(values, sizeof(float), 12, f);
  return fclose(f) == 0;
}

/* Runs after main, when the thread's thread_local objects are gone: the last error and a
 * state dict still work (a long error message was left before). Any failure is exit 3; a
 * write into freed storage would abort. */
static void CallAtExit(void) {
  sdrt_state_dict_t sd = NULL;
  if (sdrt_state_dict_create(&sd) != SDRT_OK || sdrt_state_dict_destroy(sd) != SDRT_OK ||
      sdrt_state_dict_destroy(sd) != SDRT_INVALID_ARGUMENT ||
      strstr(sdrt_last_error(), "already destroyed") == NULL) {
    fprintf(stderr, "an sdrt call from an atexit handler failed: %s\n", sdrt_last_error());
    _Exit(3);
  }
}

int main(int argc, char** argv) {
  sdrt_checkpoint_t missing = NULL;
  CHECK(atexit(CallAtExit) == 0);
  CHECK(sdrt_checkpoint_open("/no/such/folder/of/a/checkpoint/with/a/long/name.safetensors",
                             &missing) != SDRT_OK);
  CHECK(strlen(sdrt_last_error()) > 64); /* held on the heap, not in the string itself */
  /* Versions. */
  char expected[32];
  const int number = sdrt_get_version_number();
  snprintf(expected, sizeof expected, "%d.%d.%d", number / 10000, number / 100 % 100,
           number % 100);
  CHECK(strcmp(sdrt_get_version(), expected) == 0);
  CHECK(sdrt_get_abi_version() == SDRT_C_ABI_VERSION);
  CHECK(sdrt_get_api_version() == SDRT_C_API_VERSION);
  {
    /* The load options' defaults, the fields of version 4 included. */
    const sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
    CHECK(load.struct_size == sizeof(sdrt_load_options_t));
    CHECK(load.read == SDRT_READ_AUTO && load.bucket_bytes == (int64_t)256 << 20);
    CHECK(load.num_unexpected == NULL && load.staging_bytes == (int64_t)256 << 20);
  }
  {
    /* Version 5: weight maps, NULL (matched by name) in both options by default. */
    const sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
    const sdrt_reshard_options_t reshard = SDRT_RESHARD_OPTIONS_INIT;
    CHECK(load.weight_map == NULL && reshard.weight_map == NULL);
    CHECK(reshard.struct_size == sizeof(sdrt_reshard_options_t) &&
          reshard.bucket_bytes == (int64_t)256 << 20);
  }
  {
    /* Version 6: one reader per rank, each rank reading its own bytes, by default. */
    const sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
    CHECK(load.readers == 0 && load.share_reads == 0 && load.weight_map == NULL);
  }

  /* Status strings. */
  CHECK(strcmp(sdrt_status_string(SDRT_OK), "OK") == 0);
  CHECK(strcmp(sdrt_status_string(SDRT_INVALID_ARGUMENT), "INVALID_ARGUMENT") == 0);
  CHECK(strcmp(sdrt_status_string(SDRT_UNAUTHENTICATED), "UNAUTHENTICATED") == 0);
  CHECK(strcmp(sdrt_status_string((sdrt_status_t)99), "UNKNOWN_STATUS") == 0);
  CHECK(SDRT_NOT_FOUND == 5 && SDRT_DATA_LOSS == 15); /* absl::StatusCode's values */

  /* NULLs and the last error. */
  CHECK(sdrt_checkpoint_open(NULL, NULL) == SDRT_INVALID_ARGUMENT);
  CHECK(strstr(sdrt_last_error(), "path is NULL") != NULL);
  {
    sdrt_checkpoint_t ckpt = NULL;
    CHECK(sdrt_checkpoint_open("/nonexistent/sdrt/model.safetensors", &ckpt) == SDRT_NOT_FOUND);
    CHECK(ckpt == NULL);
    CHECK(strlen(sdrt_last_error()) > 0);
  }
  CHECK(sdrt_state_dict_destroy(NULL) == SDRT_OK);
  CHECK(strcmp(sdrt_last_error(), "") == 0); /* a call that succeeds clears it */
  CHECK(sdrt_checkpoint_close(NULL) == SDRT_OK);
  CHECK(sdrt_comm_destroy(NULL) == SDRT_OK);
  CHECK(sdrt_reshard_plan_destroy(NULL) == SDRT_OK);
  CHECK(sdrt_reshard_bound_destroy(NULL) == SDRT_OK);
  CHECK(sdrt_reshard_bound_execute(NULL, NULL) == SDRT_INVALID_ARGUMENT);
  CHECK(strstr(sdrt_last_error(), "bound") != NULL);
  {
    int rank = -1;
    CHECK(sdrt_comm_rank(NULL, &rank) == SDRT_INVALID_ARGUMENT);
    CHECK(rank == -1);
  }

  /* Stats: struct_size checked. */
  {
    sdrt_stats_t stats = SDRT_STATS_INIT;
    CHECK(sdrt_get_last_stats(&stats) == SDRT_OK);
    stats.struct_size = sizeof(stats) + 8;
    CHECK(sdrt_get_last_stats(&stats) == SDRT_INVALID_ARGUMENT);
    stats.struct_size = sizeof(size_t);
    CHECK(sdrt_get_last_stats(&stats) == SDRT_INVALID_ARGUMENT);
  }

  /* A state dict of malloc'd buffers, and its offload to CPU memory sdrt owns. */
  {
    sdrt_state_dict_t sd = NULL;
    sdrt_state_dict_t cpu = NULL;
    int64_t shape[2] = {3, 4};
    float* buffer = (float*)malloc(12 * sizeof(float));
    DLTensor t;
    int i;
    int64_t count = 0;
    const char* name = NULL;
    const DLTensor* view = NULL;
    int is_dtensor = -1;
    sdrt_offload_options_t offload = SDRT_OFFLOAD_OPTIONS_INIT;
    for (i = 0; i < 12; ++i) buffer[i] = (float)i * 0.25f;
    t = CpuFloats(buffer, 2, shape);
    CHECK(sdrt_state_dict_create(&sd) == SDRT_OK);
    CHECK(sdrt_state_dict_add(sd, "layer.weight", &t, NULL) == SDRT_OK);
    CHECK(sdrt_state_dict_count(sd, &count) == SDRT_OK && count == 1);
    CHECK(sdrt_state_dict_get(sd, 0, &name, &view, &is_dtensor) == SDRT_OK);
    CHECK(strcmp(name, "layer.weight") == 0 && view->data == buffer && is_dtensor == 0);
    CHECK(sdrt_state_dict_get(sd, 1, &name, &view, NULL) == SDRT_OUT_OF_RANGE);
    t.data = NULL;
    CHECK(sdrt_state_dict_add(sd, "null", &t, NULL) == SDRT_INVALID_ARGUMENT);
    t.data = buffer;
    t.dtype.lanes = 2;
    CHECK(sdrt_state_dict_add(sd, "bad", &t, NULL) == SDRT_INVALID_ARGUMENT);
    t.dtype.lanes = 1;
    offload.struct_size = 0;
    CHECK(sdrt_offload(sd, &offload, &cpu) == SDRT_INVALID_ARGUMENT);
    CHECK(cpu == NULL);
    offload.struct_size = sizeof offload;
    CHECK(sdrt_offload(sd, &offload, &cpu) == SDRT_OK);
    CHECK(sdrt_state_dict_get(cpu, 0, &name, &view, NULL) == SDRT_OK);
    CHECK(view->data != buffer && memcmp(view->data, buffer, 12 * sizeof(float)) == 0);
    {
      sdrt_stats_t stats = SDRT_STATS_INIT;
      CHECK(sdrt_get_last_stats(&stats) == SDRT_OK);
      /* The last call with stats was the offload (get is not one). */
      CHECK(stats.bytes_written == 48);
    }
    CHECK(sdrt_state_dict_destroy(cpu) == SDRT_OK);
    CHECK(sdrt_state_dict_destroy(sd) == SDRT_OK);
    free(buffer);
  }

  /* Handles survive misuse: a second destroy, a destroyed handle, a handle of another kind
   * and a value sdrt never returned are SDRT_INVALID_ARGUMENT naming what they are, and
   * change nothing. */
  {
    sdrt_state_dict_t sd = NULL;
    sdrt_state_dict_t other = NULL;
    int64_t count = -1;
    int not_a_handle = 0;
    CHECK(sdrt_state_dict_create(&sd) == SDRT_OK);
    CHECK(sdrt_state_dict_destroy(sd) == SDRT_OK);
    CHECK(sdrt_state_dict_destroy(sd) == SDRT_INVALID_ARGUMENT);
    CHECK(strcmp(sdrt_last_error(),
                 "sdrt_state_dict_destroy: state_dict is a state dict handle that was already "
                 "destroyed") == 0);
    /* A new state dict (its object likely where the old one's was) is another handle, and
     * the old one stays destroyed. */
    CHECK(sdrt_state_dict_create(&other) == SDRT_OK);
    CHECK(other != sd);
    CHECK(sdrt_state_dict_count(sd, &count) == SDRT_INVALID_ARGUMENT && count == -1);
    CHECK(strstr(sdrt_last_error(),
                 "state_dict is a state dict handle that was already destroyed") != NULL);
    /* A state dict where a checkpoint is expected: refused, and not freed by the close. */
    CHECK(sdrt_checkpoint_num_tensors((sdrt_checkpoint_t)other, &count) == SDRT_INVALID_ARGUMENT);
    CHECK(strcmp(sdrt_last_error(),
                 "sdrt_checkpoint_num_tensors: checkpoint is a state dict handle, not a "
                 "checkpoint") == 0);
    CHECK(sdrt_checkpoint_close((sdrt_checkpoint_t)other) == SDRT_INVALID_ARGUMENT);
    CHECK(sdrt_comm_destroy((sdrt_comm_t)sd) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "comm is a destroyed state dict handle, not a communicator") !=
          NULL);
    CHECK(sdrt_state_dict_count(other, &count) == SDRT_OK && count == 0);
    /* The address of something else. */
    CHECK(sdrt_state_dict_destroy((sdrt_state_dict_t)&not_a_handle) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "is not a state dict handle: sdrt never returned this value") !=
          NULL);
    CHECK(sdrt_reshard_plan_destroy((sdrt_reshard_plan_t)other) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "plan is a state dict handle, not a reshard plan") != NULL);
    CHECK(sdrt_reshard_bound_execute((sdrt_reshard_bound_t)other, NULL) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "bound is a state dict handle, not a bound reshard") != NULL);
    CHECK(sdrt_state_dict_destroy(other) == SDRT_OK);
  }

  /* No communicator: rank 1 of a 2-rank Shard(0) mesh gets rows 2 and 3 of "w" from the
   * file (sdrt_load) and rank 0 rows 0 and 1 from a full state dict (sdrt_distribute). */
  {
    float full[12];
    float piece[6] = {0};
    int64_t full_shape[2] = {4, 3};
    int64_t piece_shape[2] = {2, 3};
    int64_t mesh_shape[1] = {2};
    int64_t missing = -1;
    DLTensor t;
    sdrt_dtensor_spec_t spec = SDRT_DTENSOR_SPEC_INIT;
    sdrt_checkpoint_t ckpt = NULL;
    sdrt_state_dict_t whole = NULL;
    sdrt_state_dict_t local = NULL;
    sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
    sdrt_distribute_options_t distribute = SDRT_DISTRIBUTE_OPTIONS_INIT;
    int i;
    for (i = 0; i < 12; ++i) full[i] = (float)i * 0.5f;
    CHECK(argc == 2 && WriteFile(argv[1], full));
    memset(&t, 0, sizeof t);
    t.device.device_type = kDLCPU;
    t.ndim = 2;
    t.dtype.code = kDLFloat;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    spec.mesh_ndim = 1;
    spec.mesh_shape = mesh_shape;
    spec.placements = "S(0)";
    spec.global_ndim = 2;
    spec.global_shape = full_shape;
    t.data = piece;
    t.shape = piece_shape;
    CHECK(sdrt_state_dict_create(&local) == SDRT_OK);
    CHECK(sdrt_state_dict_add(local, "w", &t, &spec) == SDRT_OK);

    CHECK(argc == 2 && sdrt_checkpoint_open(argv[1], &ckpt) == SDRT_OK);
    CHECK(sdrt_load(ckpt, local, &load) == SDRT_INVALID_ARGUMENT); /* no comm and no rank */
    CHECK(strstr(sdrt_last_error(), "rank") != NULL);
    load.rank = 1;
    load.num_missing = &missing;
    CHECK(sdrt_load(ckpt, local, &load) == SDRT_OK);
    CHECK(missing == 0);
    CHECK(memcmp(piece, full + 6, sizeof piece) == 0);

    t.data = full;
    t.shape = full_shape;
    CHECK(sdrt_state_dict_create(&whole) == SDRT_OK);
    CHECK(sdrt_state_dict_add(whole, "w", &t, NULL) == SDRT_OK);
    memset(piece, 0, sizeof piece);
    distribute.rank = 0;
    CHECK(sdrt_distribute(whole, local, &distribute) == SDRT_OK);
    CHECK(memcmp(piece, full, sizeof piece) == 0);

    CHECK(sdrt_state_dict_destroy(local) == SDRT_OK);
    CHECK(sdrt_state_dict_destroy(whole) == SDRT_OK);
    CHECK(sdrt_checkpoint_close(ckpt) == SDRT_OK);
    if (argc == 2) remove(argv[1]);
  }

  /* Weight maps: made from JSON (a length, no NUL needed) or built in, refused with the
   * rule named, destroyed once; a map borrowed by a load without a communicator: "w" of the
   * file loads into the entry "layer.w" (a rename), rank 1 of a 2-rank Shard(0) mesh. */
  {
    static const char rename[] = "{\"rules\": [{\"rename\": \"w\", \"to\": \"layer.w\"}]}";
    static const char bad[] = "{\"rules\": [{\"fuse\": [\"a\"], \"to\": \"b\"}]}";
    sdrt_weight_map_t map = NULL;
    sdrt_weight_map_t other = NULL;
    float full[12];
    float piece[6] = {0};
    int64_t full_shape[2] = {4, 3};
    int64_t piece_shape[2] = {2, 3};
    int64_t mesh_shape[1] = {2};
    int64_t missing = -1;
    int64_t unexpected = -1;
    DLTensor t;
    sdrt_dtensor_spec_t spec = SDRT_DTENSOR_SPEC_INIT;
    sdrt_checkpoint_t ckpt = NULL;
    sdrt_state_dict_t local = NULL;
    sdrt_load_options_t load = SDRT_LOAD_OPTIONS_INIT;
    int i;
    CHECK(sdrt_weight_map_from_json(bad, sizeof bad - 1, &map) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "sdrt_weight_map_from_json: weight map rule 0 (fuse)") !=
          NULL);
    CHECK(map == NULL);
    CHECK(sdrt_weight_map_from_json(rename, 5, &map) == SDRT_INVALID_ARGUMENT); /* cut short */
    CHECK(sdrt_weight_map_from_json(NULL, 0, &map) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "json is NULL") != NULL);
    /* A length past any buffer (SIZE_MAX) is refused, not taken as a string's size. */
    CHECK(sdrt_weight_map_from_json(rename, (size_t)-1, &map) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "bytes of JSON; at most 1 MiB") != NULL);
    CHECK(sdrt_weight_map_builtin("vllm-llama", 16, NULL) == SDRT_INVALID_ARGUMENT);
    CHECK(sdrt_weight_map_builtin("no-such-map", 16, &map) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "vllm-llama") != NULL);
    CHECK(sdrt_weight_map_builtin("vllm-llama", 0, &map) == SDRT_INVALID_ARGUMENT);
    CHECK(map == NULL);
    CHECK(sdrt_weight_map_builtin("megatron-llama", 16, &other) == SDRT_OK);
    CHECK(sdrt_weight_map_destroy(other) == SDRT_OK);
    CHECK(sdrt_weight_map_destroy(other) == SDRT_INVALID_ARGUMENT);
    CHECK(strcmp(sdrt_last_error(),
                 "sdrt_weight_map_destroy: map is a weight map handle that was already "
                 "destroyed") == 0);
    CHECK(sdrt_weight_map_destroy(NULL) == SDRT_OK);
    CHECK(sdrt_weight_map_from_json(rename, sizeof rename - 1, &map) == SDRT_OK);

    for (i = 0; i < 12; ++i) full[i] = (float)i * 0.75f;
    CHECK(argc == 2 && WriteFile(argv[1], full));
    memset(&t, 0, sizeof t);
    t.device.device_type = kDLCPU;
    t.ndim = 2;
    t.dtype.code = kDLFloat;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    t.data = piece;
    t.shape = piece_shape;
    spec.mesh_ndim = 1;
    spec.mesh_shape = mesh_shape;
    spec.placements = "S(0)";
    spec.global_ndim = 2;
    spec.global_shape = full_shape;
    CHECK(sdrt_state_dict_create(&local) == SDRT_OK);
    CHECK(sdrt_state_dict_add(local, "layer.w", &t, &spec) == SDRT_OK);
    CHECK(argc == 2 && sdrt_checkpoint_open(argv[1], &ckpt) == SDRT_OK);
    load.rank = 1;
    load.num_missing = &missing;
    load.num_unexpected = &unexpected;
    load.weight_map = (sdrt_weight_map_t)local; /* a state dict is not a map */
    CHECK(sdrt_load(ckpt, local, &load) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "weight_map is a state dict handle, not a weight map") !=
          NULL);
    load.weight_map = other; /* destroyed */
    CHECK(sdrt_load(ckpt, local, &load) == SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "weight map handle that was already destroyed") != NULL);
    load.weight_map = map;
    CHECK(sdrt_load(ckpt, local, &load) == SDRT_OK);
    CHECK(missing == 0 && unexpected == 0);
    CHECK(memcmp(piece, full + 6, sizeof piece) == 0);
    /* The load only borrowed the map. */
    CHECK(sdrt_weight_map_destroy(map) == SDRT_OK);
    load.weight_map = NULL; /* by name: "layer.w" is not in the file */
    CHECK(sdrt_load(ckpt, local, &load) == SDRT_OK);
    CHECK(missing == 1 && unexpected == 1);
    CHECK(sdrt_state_dict_destroy(local) == SDRT_OK);
    CHECK(sdrt_checkpoint_close(ckpt) == SDRT_OK);
    if (argc == 2) remove(argv[1]);
  }

  /* Local shapes and global offsets, as torch.chunk cuts: 10 rows over 4 ranks are 3, 3,
   * 3, 1 at 0, 3, 6, 9. */
  {
    const int64_t mesh4[1] = {4};
    const int64_t rows[2] = {10, 6};
    const int64_t want_rows[4] = {3, 3, 3, 1};
    const int64_t want_offsets[4] = {0, 3, 6, 9};
    sdrt_dtensor_spec_t spec = SDRT_DTENSOR_SPEC_INIT;
    sdrt_local_shard_t piece = SDRT_LOCAL_SHARD_INIT;
    int r;
    spec.mesh_ndim = 1;
    spec.mesh_shape = mesh4;
    spec.placements = "S(0)";
    spec.global_ndim = 2;
    spec.global_shape = rows;
    for (r = 0; r < 4; ++r) {
      CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, r, &piece) == SDRT_OK);
      CHECK(piece.ndim == 2 && piece.local_shape[0] == want_rows[r] && piece.local_shape[1] == 6);
      CHECK(piece.global_offset[0] == want_offsets[r] && piece.global_offset[1] == 0);
      CHECK(piece.is_box == 1 && strcmp(piece.placements, "[S(0)]") == 0);
    }
    /* A rank not in the mesh: PyTorch's ((0,), ()). */
    CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 4, &piece) == SDRT_OK);
    CHECK(piece.ndim == 1 && piece.local_shape[0] == 0 && piece.global_offset == NULL);
    /* 2 rows over 4 ranks: 1, 1, 0, 0; an empty piece's offset is the dim's size. */
    {
      const int64_t two[1] = {2};
      spec.global_ndim = 1;
      spec.global_shape = two;
      CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 3, &piece) == SDRT_OK);
      CHECK(piece.ndim == 1 && piece.local_shape[0] == 0 && piece.global_offset[0] == 2);
    }
    /* A 2-D mesh over ranks 10..13, [S(0), S(1)] on [5, 3]: rank 13, at (1, 1), holds rows
     * 3-4 and column 2. */
    {
      const int64_t mesh22[2] = {2, 2};
      const int64_t ranks[4] = {10, 11, 12, 13};
      const int64_t shape[2] = {5, 3};
      spec.mesh_ndim = 2;
      spec.mesh_shape = mesh22;
      spec.mesh_ranks = ranks;
      spec.placements = "[S(0), S(1)]";
      spec.global_ndim = 2;
      spec.global_shape = shape;
      CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 13, &piece) == SDRT_OK);
      CHECK(piece.local_shape[0] == 2 && piece.local_shape[1] == 1);
      CHECK(piece.global_offset[0] == 3 && piece.global_offset[1] == 2 && piece.is_box == 1);
      CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 11, &piece) == SDRT_OK);
      CHECK(piece.local_shape[0] == 3 && piece.local_shape[1] == 1);
      CHECK(piece.global_offset[0] == 0 && piece.global_offset[1] == 2);
      /* fsdp-tp over the 2x2 mesh: q_proj [10, 4] is [_S(0, 2), S(0)]; rank 11, at (0, 1),
       * holds rows 5-7 (the first dp chunk of the second tp chunk). */
      spec.placements = NULL;
      {
        const int64_t q[2] = {10, 4};
        spec.global_shape = q;
        CHECK(sdrt_compute_local_shape_and_global_offset(&spec, "fsdp-tp",
                                                         "model.layers.0.self_attn.q_proj.weight",
                                                         11, &piece) == SDRT_OK);
        CHECK(strcmp(piece.placements, "[_S(0, 2), S(0)]") == 0);
        CHECK(piece.local_shape[0] == 3 && piece.local_shape[1] == 4);
        CHECK(piece.global_offset[0] == 5 && piece.is_box == 1);
      }
      spec.mesh_ranks = NULL;
    }
    /* A plan by name on a 1-D mesh: tp makes o_proj row-parallel, Shard(1). */
    {
      const int64_t o[2] = {8, 10};
      spec.mesh_ndim = 1;
      spec.mesh_shape = mesh4;
      spec.global_shape = o;
      CHECK(sdrt_compute_local_shape_and_global_offset(
                &spec, "tp", "layers.0.self_attn.o_proj.weight", 3, &piece) == SDRT_OK);
      CHECK(strcmp(piece.placements, "[S(1)]") == 0 && piece.local_shape[0] == 8 &&
            piece.local_shape[1] == 1 && piece.global_offset[1] == 9);
      /* A _StridedShard piece that is not one run: not a box. */
      spec.placements = "_S(0, 2)";
      CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 0, &piece) == SDRT_OK);
      CHECK(piece.is_box == 0 && piece.local_shape[0] == 2);
    }
    /* Errors: both placements and a plan, neither, an unknown plan, a bad struct_size; *out
     * is left alone. */
    spec.placements = "S(0)";
    piece.ndim = -7;
    CHECK(sdrt_compute_local_shape_and_global_offset(&spec, "tp", "w", 0, &piece) ==
          SDRT_INVALID_ARGUMENT);
    spec.placements = NULL;
    CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 0, &piece) ==
          SDRT_INVALID_ARGUMENT);
    CHECK(sdrt_compute_local_shape_and_global_offset(&spec, "no-such-plan", "w", 0, &piece) ==
          SDRT_INVALID_ARGUMENT);
    CHECK(strstr(sdrt_last_error(), "no-such-plan") != NULL);
    spec.placements = "[S(0), S(0)]";
    CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 0, &piece) ==
          SDRT_INVALID_ARGUMENT);
    spec.placements = "S(0)";
    piece.struct_size = 8;
    CHECK(sdrt_compute_local_shape_and_global_offset(&spec, NULL, NULL, 0, &piece) ==
          SDRT_INVALID_ARGUMENT);
    CHECK(piece.ndim == -7);
    CHECK(sdrt_compute_local_shape_and_global_offset(NULL, NULL, NULL, 0, &piece) ==
          SDRT_INVALID_ARGUMENT);
  }

  if (failures == 0) printf("c_api_header_c: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
