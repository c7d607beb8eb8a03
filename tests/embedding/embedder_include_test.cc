// A program that embeds sdrt and has folders of its own named core/, tensor/ and comm/ on
// its include path (tests/embedding/include), holding headers at the very paths sdrt's
// headers have below the repository root. It is compiled twice (tests/CMakeLists.txt): with
// its folders searched before sdrt's include folder and after it. It compiles only if
// neither side shadows the other: sdrt's headers include only "sdrt/..." paths, so they
// never reach the program's files, and the program's "tensor/tensor.h" is its own
// whatever the order. (It includes its own headers in angle brackets, as a program does
// with headers found on its include path; quotes would search the same folders.) Running it
// checks that sdrt's types work alongside the program's.
#include <comm/communicator.h>  // the program's own headers (tests/embedding/include)
#include <core/state_dict/state_dict.h>
#include <tensor/tensor.h>

#include <cstdio>

#include "sdrt/comm/communicator.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/flatten.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/tensor.h"

// The program's own headers, not sdrt's, answered its includes.
static_assert(engine::Tensor::kEmbedderTensorMarker == 7, "tensor/tensor.h is not the program's");
static_assert(engine::StateDict::kEmbedderStateDictMarker == 11,
              "core/state_dict/state_dict.h is not the program's");
static_assert(engine::Communicator::kEmbedderCommunicatorMarker == 13,
              "comm/communicator.h is not the program's");

int main() {
  // sdrt's own types, used next to the program's.
  absl::StatusOr<sdrt::Tensor> t = sdrt::Tensor::Zeros({2, 3}, sdrt::DType::kFloat32);
  if (!t.ok()) {
    std::fprintf(stderr, "Tensor::Zeros: %s\n", t.status().ToString().c_str());
    return 1;
  }
  sdrt::Map inner;
  inner.Set("weight", sdrt::Value(*t));
  sdrt::Map state_dict;
  state_dict.Set("layer", sdrt::Value(std::move(inner)));
  absl::StatusOr<sdrt::FlatStateDict> flat = sdrt::FlattenStateDict(state_dict);
  if (!flat.ok() || flat->flat.size() != 1 || flat->flat.Find("layer.weight") == nullptr) {
    std::fprintf(stderr, "FlattenStateDict did not give layer.weight\n");
    return 1;
  }
  std::printf("sdrt headers and the program's own core/, tensor/, comm/ headers coexist\n");
  return 0;
}
