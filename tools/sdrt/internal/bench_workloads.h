// The state dicts `sdrt bench` times, and where each rank's Shard(0) piece of every tensor
// lies in the full bytes. The synthetic bytes and the digest are the ones
// bench/peer/pytorch_distributed_peer.py makes, so that equal digests on both sides mean the
// same source, and #wrong = 0 on both the same results.
//
//   "llama":  Llama-3-8B's 291 tensors and names with every size divided by 8 except the
//             head counts and the 32 layers (hidden 512 = 32 heads x 16, 8 kv heads so k/v
//             are 128 x 512, intermediate 1792, vocab 16032): bfloat16, 239.4 MiB;
//   "small":  10,000 float32 1-D tensors of 64..1024 elements ("block.{i/100}.param{i%100}",
//             element count 64 + (i * 7919) % 961), 20.8 MiB;
//   "tiny":   small's names with 8 float32 elements each (313 KiB): the per-tensor cost
//             of an operation with next to no bytes to move;
//   "minilm": the real all-MiniLM-L6-v2 file where scripts/fetch-model.sh puts it;
//   a path:   any safetensors file, Hugging Face folder or folder of safetensors files
//             (CheckpointSource), mapped on every rank.
// Synthetic bytes: tensor t, little-endian word j = SplitMix64((t + 1) * 0x9E3779B97F4A7C15
// + j), the last word cut to the tensor's size.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_WORKLOADS_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_WORKLOADS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::cli {

struct BenchWorkload {
  std::string name;                // "llama", "small", "tiny", "minilm" or the path given
  std::vector<std::string> names;  // tensor names, in order
  std::vector<Tensor> full;        // the full tensors (contiguous, CPU), on every rank
  std::shared_ptr<const CheckpointSource> source;  // keeps a mapped file alive
  int64_t bytes = 0;                               // sum of full[i].nbytes()
  uint64_t digest = 0;                             // BenchDigest(full)
  std::string type;                                // the one dtype's name, or "mixed"
};

// The path of the cached all-MiniLM-L6-v2 file: $SDRT_CACHE_DIR, else $XDG_CACHE_HOME/sdrt,
// else $HOME/.cache/sdrt, then /all-MiniLM-L6-v2/model.safetensors (scripts/fetch-model.sh).
std::string MiniLmPath();

// Workload `name` (above). `max_tensors` > 0 keeps only the first that many tensors (the
// digest is then of those). Errors: NotFound for minilm when the file is absent (the
// message says to run scripts/fetch-model.sh) and for a path that does not exist;
// CheckpointSource::Open's errors for a bad file; InvalidArgument for a tensor whose dim-0
// rows are not whole bytes (packed sub-byte dtypes), which Shard(0) cannot cut;
// ResourceExhausted when memory runs out. `arena`: a synthetic workload's tensors are views
// of one allocation (2 MiB pages), each at a 64-byte aligned offset; a file's are mapped
// either way.
absl::StatusOr<BenchWorkload> MakeBenchWorkload(const std::string& name, int64_t max_tensors,
                                                bool arena = false);

// SplitMix64 (Steele, Lea, Flood), the generator of the synthetic bytes.
uint64_t SplitMix64(uint64_t x);

// The fingerprint both programs print: over tensors t in order and each tensor's bytes
// zero-padded to whole little-endian words w_j, the sum of w_j * (2j + 1) * (t + 1) mod 2^64.
uint64_t BenchDigest(const std::vector<Tensor>& tensors);

// Where rank q's piece of each tensor lies when every tensor with at least one dim is
// DTensor [Shard(0)] on a 1-D mesh of `ranks` ranks (PyTorch's chunking of dim 0: chunks of
// ceil(dim0 / ranks) rows, the last ones short or empty) and a 0-dim tensor is Replicate
// (every rank holds it whole). Computed here from the shapes, independently of core/.
struct BenchPiece {
  int64_t offset = 0;  // bytes from the start of the full tensor
  int64_t bytes = 0;
};

class BenchLayout {
 public:
  BenchLayout(const BenchWorkload& workload, int ranks);

  int ranks() const { return ranks_; }
  // Tensor i's piece on rank q.
  const BenchPiece& piece(size_t i, int q) const { return pieces_[i * ranks_ + q]; }
  // Whether tensor i is sharded (else replicated).
  bool sharded(size_t i) const { return sharded_[i] != 0; }
  // Rank q's pieces of the sharded tensors (what a flat all-gather moves from it).
  int64_t gather_bytes(int q) const { return gather_bytes_[q]; }
  // Rank q's pieces of every tensor (what distribute copies on it).
  int64_t local_bytes(int q) const { return local_bytes_[q]; }

 private:
  int ranks_;
  std::vector<BenchPiece> pieces_;  // [tensor][rank]
  std::vector<char> sharded_;
  std::vector<int64_t> gather_bytes_;
  std::vector<int64_t> local_bytes_;
};

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_WORKLOADS_H_
