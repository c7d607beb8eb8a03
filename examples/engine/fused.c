/* The engine's vLLM layout (fused.h): given a Hugging Face folder whose config.json gives
 * the attention head size, a Llama's q, k and v projections live in one fused qkv_proj
 * buffer per rank ([its q heads; its k heads; its v heads], a kv head replicated on the
 * ranks that share it when there are fewer kv heads than ranks), gate and up in one
 * gate_up_proj ([its gate rows; its up rows]), and the embedding and lm_head are padded with
 * zero rows to a multiple of 64. engine.c's one sdrt_load fills them through sdrt's built-in
 * weight map "vllm-llama"; here the buffers are laid out and, for the check, compared row by
 * row with their components read whole. */
#include "fused.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int EndsWith(const char* s, const char* suffix) {
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The integer value of "key" in config.json's text, or 0. */
static int64_t ConfigInt(const char* json, const char* key) {
  char quoted[64];
  snprintf(quoted, sizeof quoted, "\"%s\"", key);
  const char* p = strstr(json, quoted);
  if (p == NULL) return 0;
  p += strlen(quoted);
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == ':') ++p;
  return strtoll(p, NULL, 10);
}

int64_t HeadSize(const char* checkpoint) {
  char path[4096], json[1 << 16];
  snprintf(path, sizeof path, "%s/config.json", checkpoint);
  FILE* f = fopen(path, "rb");
  if (f == NULL) return 0;
  const size_t n = fread(json, 1, sizeof json - 1, f);
  fclose(f);
  json[n] = '\0';
  const int64_t head_dim = ConfigInt(json, "head_dim");
  const int64_t hidden = ConfigInt(json, "hidden_size");
  const int64_t heads = ConfigInt(json, "num_attention_heads");
  return head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : 0;
}

int FusedRole(const char* name) {
  static const char* const kSuffixes[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight", "mlp.gate_proj.weight",
                                          "mlp.up_proj.weight"};
  for (int i = 0; i < 5; ++i) {
    if (EndsWith(name, kSuffixes[i])) {
      return EndsWith(name, "q_proj.weight") || EndsWith(name, "gate_proj.weight") ? 2 : 1;
    }
  }
  return 0;
}

int64_t VllmRows(const char* name, int64_t rows) {
  if (strcmp(name, "model.embed_tokens.weight") == 0 || strcmp(name, "lm_head.weight") == 0) {
    return (rows + 63) / 64 * 64; /* vLLM's padded vocabulary */
  }
  return rows;
}

/* The checkpoint tensor `name`'s info, or 0 when there is none; looked for from tensor
 * `from` on (a layer's tensors are usually together). */
static int FindTensor(sdrt_checkpoint_t checkpoint, int64_t count, int64_t from,
                      const char* name, sdrt_tensor_info_t* info) {
  for (int64_t k = 0; k < count; ++k) {
    Check(sdrt_checkpoint_tensor_info(checkpoint, (from + k) % count, info),
          "sdrt_checkpoint_tensor_info");
    if (strcmp(info->name, name) == 0) return 1;
  }
  return 0;
}

/* Its components' shapes from the checkpoint, this rank's rows of each as vLLM cuts them
 * (attention by whole heads of `unit` rows, or with fewer heads than ranks the head of this
 * rank's group; the MLP by rows), a buffer of their sum. */
void AddFused(Fused* f, sdrt_checkpoint_t checkpoint, int64_t count, int64_t index,
              const char* first, int64_t unit, int rank, int ranks, sdrt_state_dict_t engine) {
  static const char* const kLabels[2][3] = {{"q_proj", "k_proj", "v_proj"},
                                            {"gate_proj", "up_proj", ""}};
  const int qkv = EndsWith(first, "q_proj.weight");
  const int64_t u = qkv ? unit : 1; /* the MLP is cut by rows */
  const size_t prefix = strlen(first) - strlen(qkv ? "q_proj.weight" : "gate_proj.weight");
  snprintf(f->name, sizeof f->name, "%.*s%s", (int)prefix, first,
           qkv ? "qkv_proj.weight" : "gate_up_proj.weight");
  f->parts = qkv ? 3 : 2;
  sdrt_tensor_info_t info = SDRT_TENSOR_INFO_INIT;
  f->local_shape[0] = 0;
  for (int c = 0; c < f->parts; ++c) {
    f->label[c] = kLabels[qkv ? 0 : 1][c];
    snprintf(f->component[c], sizeof f->component[c], "%.*s%s.weight", (int)prefix, first,
             f->label[c]);
    if (!FindTensor(checkpoint, count, index, f->component[c], &info) || info.ndim != 2) {
      fprintf(stderr, "engine: %s: no matrix %s\n", f->name, f->component[c]);
      exit(2); /* bad input: the checkpoint lacks a part */
    }
    const int64_t heads = info.shape[0] / u;
    f->rows[c] = info.shape[0];
    if (heads > 0 && heads % ranks == 0) {
      f->mine[c] = f->rows[c] / ranks;
      f->begin[c] = rank * f->mine[c];
    } else if (heads > 0 && ranks % heads == 0) {
      f->mine[c] = u;
      f->begin[c] = rank / (ranks / heads) * u;
    } else {
      fprintf(stderr, "engine: %s: %" PRId64 " %s cannot be cut into %d parts\n",
              f->component[c], heads, qkv ? "heads" : "rows", ranks);
      exit(2); /* bad input: this many ranks cannot serve the model */
    }
    f->local_shape[0] += f->mine[c];
  }
  f->local_shape[1] = info.shape[1];
  f->global_shape[0] = f->local_shape[0] * ranks;
  f->global_shape[1] = info.shape[1];
  f->elem = info.dtype.bits / 8;
  AllocTensor(&f->tensor, 2, f->local_shape, info.dtype, f->elem);
  const int64_t mesh_shape[1] = {ranks};
  sdrt_dtensor_spec_t spec = SDRT_DTENSOR_SPEC_INIT;
  spec.mesh_ndim = 1;
  spec.mesh_shape = mesh_shape;
  spec.placements = "S(0)";
  spec.global_ndim = 2;
  spec.global_shape = f->global_shape;
  Check(sdrt_state_dict_add(engine, f->name, &f->tensor, &spec), "sdrt_state_dict_add");
}

void AddFusedWholes(const Fused* f, sdrt_state_dict_t whole, const unsigned char* full[3]) {
  for (int c = 0; c < f->parts; ++c) {
    full[c] = AddWhole(whole, f->component[c], f->tensor.dtype, f->rows[c], f->local_shape[1]);
  }
}

int FusedMatches(const Fused* f, const unsigned char* const* full) {
  const size_t row_bytes = (size_t)f->local_shape[1] * f->elem;
  const unsigned char* mine = HostView(f->tensor.data, (size_t)f->local_shape[0] * row_bytes);
  int same = mine != NULL;
  size_t at = 0;
  for (int c = 0; same && c < f->parts; ++c) {
    const size_t bytes = (size_t)f->mine[c] * row_bytes;
    same = memcmp(mine + at, full[c] + (size_t)f->begin[c] * row_bytes, bytes) == 0;
    at += bytes;
  }
  if (mine != NULL) HostDone(mine);
  return same;
}

void PrintFused(const Fused* f, const char* result) {
  printf("engine: %s [%" PRId64 ", %" PRId64 "], rank 0's [%" PRId64 ", %" PRId64 "] =",
         f->name, f->global_shape[0], f->global_shape[1], f->local_shape[0], f->local_shape[1]);
  for (int c = 0; c < f->parts; ++c) {
    printf("%s %s rows %" PRId64 "-%" PRId64, c > 0 ? " +" : "", f->label[c], f->begin[c],
           f->begin[c] + f->mine[c] - 1);
  }
  printf(": %s\n", result);
}
