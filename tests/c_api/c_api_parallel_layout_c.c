/* The C API's parallel layouts from C (C11, -pedantic): sdrt_parallel_layout_place gives a
 * Megatron trainer's and a vLLM engine's homes of a small MoE model's tensors (pipeline
 * stages, tp cuts, experts on their ep ranks), the specs work with
 * sdrt_compute_local_shape_and_global_offset and sdrt_state_dict_add, and bad input is
 * refused without writing the specs. Exit status 0 when every check holds; each failure
 * prints its line. */
#include "sdrt/c_api.h"
#include "sdrt/tests/c_api/c_check.h"

#include <stdio.h>
#include <string.h>

/* The model: an embedding, 4 layers (q_proj, o_proj, a norm, 4 experts' down_proj), the
 * final norm and the head. */
enum { kTensors = 1 + 4 * 7 + 2 };
static const char* names[kTensors];
static int32_t ndims[kTensors];
static const int64_t* shapes[kTensors];
static char storage[kTensors][64];

static const int64_t embed[2] = {32, 8}, q[2] = {16, 8}, o[2] = {8, 16}, norm[1] = {8},
                     down[2] = {8, 6};

static void Add(int* n, const char* name, int32_t ndim, const int64_t* shape) {
  snprintf(storage[*n], sizeof storage[*n], "%s", name);
  names[*n] = storage[*n];
  ndims[*n] = ndim;
  shapes[*n] = shape;
  ++*n;
}

/* The index of tensor `name` (a failed check and 0 when there is none). */
static int Find(const char* name) {
  int i;
  for (i = 0; i < kTensors; ++i) {
    if (strcmp(names[i], name) == 0) return i;
  }
  fprintf(stderr, "no tensor %s\n", name);
  ++failures;
  return 0;
}

/* Whether spec's mesh has exactly the ranks {a, b}. */
static int RanksAre(const sdrt_dtensor_spec_t* spec, int64_t a, int64_t b) {
  return spec->mesh_ndim == 2 && spec->mesh_shape[0] * spec->mesh_shape[1] == 2 &&
         spec->mesh_ranks[0] == a && spec->mesh_ranks[1] == b;
}

int main(void) {
  sdrt_dtensor_spec_t specs[kTensors];
  sdrt_local_shard_t piece = SDRT_LOCAL_SHARD_INIT;
  char name[64];
  int i, n = 0, layer, e;
  Add(&n, "model.embed_tokens.weight", 2, embed);
  for (layer = 0; layer < 4; ++layer) {
    snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", layer);
    Add(&n, name, 2, q);
    snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", layer);
    Add(&n, name, 2, o);
    snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", layer);
    Add(&n, name, 1, norm);
    for (e = 0; e < 4; ++e) {
      snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight", layer, e);
      Add(&n, name, 2, down);
    }
  }
  Add(&n, "model.norm.weight", 1, norm);
  Add(&n, "lm_head.weight", 2, embed);
  CHECK(n == kTensors);
  for (i = 0; i < kTensors; ++i) {
    const sdrt_dtensor_spec_t init = SDRT_DTENSOR_SPEC_INIT;
    specs[i] = init;
  }

  /* A trainer, tp 2 x pp 2 on ranks 0-3: stage 0 is ranks 0-1 (layers 0-1, the embedding),
   * stage 1 ranks 2-3 (layers 2-3, the final norm and the head). */
  CHECK(sdrt_parallel_layout_place("megatron:tp=2,pp=2", 4, 0, kTensors, names, ndims, shapes,
                                   specs) == SDRT_OK);
  i = Find("model.embed_tokens.weight");
  CHECK(RanksAre(&specs[i], 0, 1) && strcmp(specs[i].placements, "[R, S(0)]") == 0);
  CHECK(specs[i].global_ndim == 2 && specs[i].global_shape == embed);
  i = Find("model.layers.2.self_attn.o_proj.weight");
  CHECK(RanksAre(&specs[i], 2, 3) && strcmp(specs[i].placements, "[R, S(1)]") == 0);
  CHECK(specs[i].mesh_shape[0] == 1 && specs[i].mesh_shape[1] == 2);
  /* Rank 3's piece of it: columns 8-15. */
  CHECK(sdrt_compute_local_shape_and_global_offset(&specs[i], NULL, NULL, 3, &piece) == SDRT_OK);
  CHECK(piece.ndim == 2 && piece.local_shape[0] == 8 && piece.local_shape[1] == 8);
  CHECK(piece.global_offset[0] == 0 && piece.global_offset[1] == 8);
  /* Rank 3's buffer of that shape added as the DTensor the spec describes. */
  {
    float buffer[8 * 8];
    int64_t buffer_shape[2] = {8, 8};
    DLTensor t;
    sdrt_state_dict_t local = NULL;
    t = CpuFloats(buffer, 2, buffer_shape);
    CHECK(sdrt_state_dict_create(&local) == SDRT_OK);
    CHECK(sdrt_state_dict_add(local, names[i], &t, &specs[i]) == SDRT_OK);
    CHECK(sdrt_state_dict_destroy(local) == SDRT_OK);
  }
  CHECK(RanksAre(&specs[Find("model.norm.weight")], 2, 3));
  CHECK(strcmp(specs[Find("model.norm.weight")].placements, "[R, R]") == 0);
  CHECK(RanksAre(&specs[Find("lm_head.weight")], 2, 3));
  /* One stored mesh per stage: the head's and the final norm's ranks are one array. */
  CHECK(specs[Find("lm_head.weight")].mesh_ranks == specs[Find("model.norm.weight")].mesh_ranks);
  CHECK(RanksAre(&specs[Find("model.layers.1.mlp.experts.3.down_proj.weight")], 0, 1));

  /* Expert parallelism: tp 2 x dp 2 with ep 2 (etp 1) on 4 ranks, one stage: expert k of 4
   * belongs to ep rank k / 2, kept by its 2 edp ranks {0, 2} or {1, 3}. */
  CHECK(sdrt_parallel_layout_place("megatron:tp=2,dp=2,ep=2", 4, 0, kTensors, names, ndims,
                                   shapes, specs) == SDRT_OK);
  CHECK(RanksAre(&specs[Find("model.layers.0.mlp.experts.1.down_proj.weight")], 0, 2));
  CHECK(RanksAre(&specs[Find("model.layers.3.mlp.experts.3.down_proj.weight")], 1, 3));

  /* An engine beside the trainer: vLLM tp 2 on ranks 4-5. */
  CHECK(sdrt_parallel_layout_place("vllm:tp=2", 2, 4, kTensors, names, ndims, shapes, specs) ==
        SDRT_OK);
  i = Find("model.layers.3.self_attn.q_proj.weight");
  CHECK(specs[i].mesh_ranks[0] == 4 && specs[i].mesh_ranks[specs[i].mesh_ndim - 1] == 5);

  /* Refused, naming why, the specs left as they were. */
  CHECK(sdrt_parallel_layout_place("megatron:tp=3", 4, 0, kTensors, names, ndims, shapes,
                                   specs) == SDRT_INVALID_ARGUMENT);
  CHECK(strstr(sdrt_last_error(), "megatron:tp=3") != NULL);
  CHECK(specs[i].mesh_ranks[0] == 4);
  CHECK(sdrt_parallel_layout_place("megatron:tp=2,pp=8", 16, 0, kTensors, names, ndims, shapes,
                                   specs) == SDRT_INVALID_ARGUMENT); /* 4 layers, 8 stages */
  CHECK(sdrt_parallel_layout_place("fsdp:dp=2", 2, 0, 1, NULL, ndims, shapes, specs) ==
        SDRT_INVALID_ARGUMENT);
  CHECK(strstr(sdrt_last_error(), "names is NULL") != NULL);
  CHECK(sdrt_parallel_layout_place("fsdp:dp=2", 2, 0, -1, names, ndims, shapes, specs) ==
        SDRT_INVALID_ARGUMENT);
  specs[0].struct_size = 0;
  CHECK(sdrt_parallel_layout_place("fsdp:dp=2", 2, 0, 1, names, ndims, shapes, specs) ==
        SDRT_INVALID_ARGUMENT);
  CHECK(strstr(sdrt_last_error(), "struct_size") != NULL);
  CHECK(sdrt_parallel_layout_place("fsdp:dp=2", 2, 0, 0, NULL, NULL, NULL, NULL) == SDRT_OK);
  if (failures == 0) printf("c_api_parallel_layout_c: every check held\n");
  return failures == 0 ? 0 : 1;
}
