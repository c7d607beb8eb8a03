// Builders shared by the state-dict operation tests (CPU, GPU and golden): deterministic
// tensors, DTensors and ShardedTensors, and opaque objects standing for Python objects.
// Arange and Full are test::Arange and test::Full (tests/support/fill.h).
#ifndef SDRT_TESTS_CORE_STATE_DICT_STATE_DICT_OPS_TEST_UTIL_H_
#define SDRT_TESTS_CORE_STATE_DICT_STATE_DICT_OPS_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace testing_ops {

using test::Full;

// A 0-dim float32 CPU tensor holding `value`.
inline Tensor Scalar(float value) { return Full({}, value); }

// The float32 elements of a CPU tensor, in row-major order (any strides).
inline std::vector<float> Floats(const Tensor& t) {
  Tensor c = *t.Contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// A DTensor on a 1-D mesh of `world` CPU ranks, Shard(0), whose local tensor is `local`
// (the shard of rank 0 of a global tensor with world * local rows).
inline DTensor ShardedRows(Tensor local, int64_t world, std::string mesh_device = "cpu") {
  auto mesh = std::make_shared<const DeviceMesh>(
      *DeviceMesh::Create({world}, {}, {}, std::move(mesh_device)));
  IntVector global = local.shape();
  global[0] *= world;
  return *DTensor::Make(std::move(local), std::move(mesh), {Placement::Shard(0)}, global);
}

// docs/SEMANTICS.md 9 item 5's ShardedTensor as rank `rank` of `world` holds it: global (5W, 10),
// shard r = arange(50r, 50r + 50) as (5, 10) at (5r, 0), placed "rank:r/<device>".
// `local` replaces the shard tensor when given (e.g. a CUDA copy).
inline ShardedTensor SpecShardedTensor(int64_t rank, int64_t world, Device device = Device::CPU(),
                                       Tensor local = Tensor()) {
  std::vector<ShardMetadata> metadata;
  for (int64_t r = 0; r < world; ++r) {
    metadata.push_back(ShardMetadata{{5 * r, 0}, {5, 10}, RemoteDevice{r, device}});
  }
  if (!local.defined()) local = test::Arange({5, 10}, DType::kFloat32, 50 * rank);
  std::vector<LocalShard> shards{LocalShard{std::move(local), metadata[rank]}};
  return *ShardedTensor::Make({5 * world, 10}, DType::kFloat32, metadata, std::move(shards));
}

// An io.BytesIO stand-in holding `contents`; clone copies the contents.
inline Opaque BytesIO(std::string contents) {
  Opaque o;
  o.object = std::make_shared<std::string>(std::move(contents));
  o.type_name = "BytesIO";
  o.clone = [](const Opaque& from) {
    Opaque copy = from;
    copy.object =
        std::make_shared<std::string>(*std::static_pointer_cast<std::string>(from.object));
    return copy;
  };
  return o;
}

// An object of a type sdrt does not know (PyTorch's "other" values), cloneable.
inline Opaque Unknown(std::string type_name) {
  Opaque o;
  o.object = std::make_shared<int>(42);
  o.type_name = std::move(type_name);
  o.clone = [](const Opaque& from) {
    Opaque copy = from;
    copy.object = std::make_shared<int>(*std::static_pointer_cast<int>(from.object));
    return copy;
  };
  return o;
}

}  // namespace testing_ops
}  // namespace sdrt

#endif  // SDRT_TESTS_CORE_STATE_DICT_STATE_DICT_OPS_TEST_UTIL_H_
