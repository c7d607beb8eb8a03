/* The engine's vLLM layout (fused.c): a Llama served as vLLM lays it out, its fused
 * qkv_proj / gate_up_proj buffers and its padded vocabulary, and their check row by row.
 * engine.c, the main program, makes the other buffers and calls these; fused.c uses the
 * engine's memory and checks from engine.c, declared at the end. */
#ifndef ENGINE_FUSED_H_
#define ENGINE_FUSED_H_

#include <stddef.h>
#include <stdint.h>

#include "sdrt/c_api.h"

/* A vLLM-style fused weight: this rank's rows of each component, one after another. */
typedef struct {
  char name[256];            /* ...self_attn.qkv_proj.weight, ...mlp.gate_up_proj.weight */
  char component[3][256];    /* the checkpoint tensors it fuses, in order */
  const char* label[3];      /* their short names: "q_proj", ... */
  int64_t rows[3];           /* each component's rows in the checkpoint */
  int64_t begin[3], mine[3]; /* this rank's rows of each: [begin, begin + mine) */
  int parts;
  DLTensor tensor;
  int64_t local_shape[2];
  int64_t global_shape[2]; /* local_shape[0] x ranks rows: a Shard(0) tensor */
  size_t elem;
} Fused;

/* The attention head size from CHECKPOINT/config.json (head_dim, or hidden_size /
 * num_attention_heads); 0 without one (a file, or a folder without it). */
int64_t HeadSize(const char* checkpoint);

/* 0 when vLLM keeps the checkpoint tensor `name` as it is; 1 when it fuses it into
 * another's buffer (k, v, up); 2 when the fused buffer is made at it (q_proj, gate_proj). */
int FusedRole(const char* name);

/* The rows vLLM gives the weight `name` of `rows` rows: the embedding and lm_head padded
 * with zero rows to a multiple of 64. */
int64_t VllmRows(const char* name, int64_t rows);

/* Fused buffer f for the layer whose q_proj (or gate_proj) is `first`, checkpoint tensor
 * `index` of `count`: this rank's rows of each component as vLLM cuts them (attention by
 * whole heads of `unit` rows), in a buffer of the engine's memory added to `engine`
 * Shard(0) over the ranks. */
void AddFused(Fused* f, sdrt_checkpoint_t checkpoint, int64_t count, int64_t index,
              const char* first, int64_t unit, int rank, int ranks, sdrt_state_dict_t engine);

/* The check: f's components added whole to `whole` (filled by its next load) into full[c];
 * whether f holds their rows [begin, begin + mine) one after another; the line rank 0
 * prints for f, ending in `result`. */
void AddFusedWholes(const Fused* f, sdrt_state_dict_t whole, const unsigned char* full[3]);
int FusedMatches(const Fused* f, const unsigned char* const* full);
void PrintFused(const Fused* f, const char* result);

/* From engine.c: its error exit, its memory and the whole matrices of its check. */
int Check(sdrt_status_t status, const char* what);
void* AllocTensor(DLTensor* t, int32_t ndim, int64_t* shape, DLDataType dtype, size_t elem);
const unsigned char* HostView(const void* data, size_t bytes);
void HostDone(const unsigned char* view);
const unsigned char* AddWhole(sdrt_state_dict_t whole, const char* name, DLDataType dtype,
                              int64_t rows, int64_t cols);

#endif /* ENGINE_FUSED_H_ */
