// CPU tests of CreateCpuStateDict (one arena), and docs/SEMANTICS.md 9 item 5 re-expressed on CPU:
// create, similarity, copy, for flags none and share. Pinning is tested in
// state_dict_ops_gpu_test.cc; here only what needs no GPU (case-021 in every flag
// combination: nothing to pin; the shared-memory half of case-020).
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/core/state_dict/state_dict_ops_test_util.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Arange;
using ::testing::HasSubstr;
using testing_ops::BytesIO;
using testing_ops::Floats;
using testing_ops::Full;
using testing_ops::Scalar;
using testing_ops::ShardedRows;
using testing_ops::Unknown;

bool ShmExists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// Every tensor holding data in `value` (plain, DTensor local, shards), in visiting order.
void CollectTensors(const Value& value, std::vector<Tensor>* out) {
  switch (value.kind()) {
    case ValueKind::kTensor:
      out->push_back(value.as_tensor());
      return;
    case ValueKind::kDTensor:
      out->push_back(value.as_dtensor().local());
      return;
    case ValueKind::kShardedTensor:
      for (const LocalShard& s : value.as_sharded().local_shards()) out->push_back(s.tensor);
      return;
    case ValueKind::kMap:
      for (size_t i = 0; i < value.as_map().size(); ++i)
        CollectTensors(value.as_map().value(i), out);
      return;
    case ValueKind::kList:
    case ValueKind::kTuple:
      for (const Value& item : value.items()) CollectTensors(item, out);
      return;
    default:
      return;
  }
}

TEST(CreateCpuStateDict, OneArenaWithAlignedSlots) {
  const Tensor tied = Arange({3, 3});
  const Map sd{{"a", Arange({7})},
               {"b", Arange({2, 5}, DType::kInt64)},
               {"strided", *Arange({3, 9}).Slice(1, 2, 6)},
               {"tied1", tied},
               {"tied2", tied},
               {"list", List{Arange({1}), Tuple{Arange({33})}}},
               {"d", ShardedRows(Arange({2, 3}), 2)},
               {"st", testing_ops::SpecShardedTensor(1, 2)}};
  for (bool share : {false, true}) {
    absl::StatusOr<Map> out = CreateCpuStateDict(sd, CreateCpuOptions{false, share});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<Tensor> made;
    CollectTensors(Value(*out), &made);
    std::vector<Tensor> sources;
    CollectTensors(Value(sd), &sources);
    ASSERT_EQ(made.size(), sources.size());
    const std::shared_ptr<Storage> arena = made[0].storage();
    EXPECT_EQ(arena->kind(), share ? StorageKind::kShared : StorageKind::kCpu);
    EXPECT_EQ(!arena->shm_name().empty(), share);
    if (share) {
      EXPECT_TRUE(ShmExists(arena->shm_name()));
    }
    int64_t end = 0;
    for (size_t i = 0; i < made.size(); ++i) {
      const Tensor& t = made[i];
      EXPECT_EQ(t.storage(), arena) << i;  // ONE storage for every tensor
      EXPECT_TRUE(t.device().is_cpu());
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(t.shape(), sources[i].shape());
      EXPECT_EQ(t.dtype(), sources[i].dtype());
      const int64_t offset = t.storage_offset() * (ElementBits(t.dtype()) / 8);
      EXPECT_EQ(offset % 256, 0) << i;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 256, 0u) << i;
      EXPECT_GE(offset, end) << "slot " << i << " overlaps the previous one";
      end = offset + t.nbytes();
    }
    EXPECT_NE(made[3].data_ptr(), made[4].data_ptr());  // tied weights get two buffers
    EXPECT_LE(end, arena->nbytes());
  }
}

TEST(CreateCpuStateDict, ArenaIsFreedWithItsLastTensorCase020SharedHalf) {
  // case-020's shared-memory half: each arena (and its shm name) goes with its last user.
  for (int repeat = 0; repeat < 10; ++repeat) {
    std::weak_ptr<Storage> arena;
    std::string shm_name;
    Tensor survivor;
    {
      absl::StatusOr<Map> out = CreateCpuStateDict(Map{{"w", Arange({1024})}, {"v", Arange({8})}},
                                                   CreateCpuOptions{false, true});
      ASSERT_TRUE(out.ok()) << out.status();
      arena = out->Find("w")->as_tensor().storage();
      shm_name = arena.lock()->shm_name();
      survivor = out->Find("v")->as_tensor();
    }
    EXPECT_FALSE(arena.expired());  // "v" still holds the arena
    EXPECT_TRUE(ShmExists(shm_name));
    survivor = Tensor();
    EXPECT_TRUE(arena.expired());
    EXPECT_FALSE(ShmExists(shm_name));
  }
}

TEST(CreateCpuStateDict, ZeroByteAndZeroDimTensorsCase021) {
  // case-021: {"a": (0,), "b": (4, 0), "c": 0-dim 3.5} (+ a 0-dim DTensor) with every flag
  // combination: same shapes and dtypes on the CPU, nothing pinned or mapped for 0 bytes.
  // Nothing needs pinning, so the pin combinations succeed without a GPU too.
  const DTensor d0 =
      *DTensor::Make(Scalar(2.5f), std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2})),
                     {Placement::Replicate()}, {});
  const Map sd{{"a", Arange({0})}, {"b", Arange({4, 0})}, {"c", Scalar(3.5f)}, {"d0", d0}};
  for (bool pin : {false, true}) {
    for (bool share : {false, true}) {
      absl::StatusOr<Map> out = CreateCpuStateDict(sd, CreateCpuOptions{pin, share});
      ASSERT_TRUE(out.ok()) << out.status() << " pin=" << pin << " share=" << share;
      for (const char* key : {"a", "b", "c"}) {
        const Tensor& t = out->Find(key)->as_tensor();
        const Tensor& s = sd.Find(key)->as_tensor();
        EXPECT_EQ(t.shape(), s.shape()) << key;
        EXPECT_EQ(t.dtype(), s.dtype()) << key;
        EXPECT_TRUE(t.device().is_cpu()) << key;
        EXPECT_FALSE(t.storage()->is_pinned()) << key;
        EXPECT_EQ(t.storage()->kind(), StorageKind::kCpu) << key;  // no shm segment
        EXPECT_NE(t.storage(), s.storage()) << key;
      }
      EXPECT_EQ(out->Find("a")->as_tensor().storage()->nbytes(), 0);
      EXPECT_EQ(out->Find("c")->as_tensor().dim(), 0);
      EXPECT_EQ(Floats(out->Find("c")->as_tensor()), std::vector<float>{0.0f});  // not copied
      // The 0-dim DTensor gets a CPU local too (PyTorch returns the source as is).
      const DTensor& d = out->Find("d0")->as_dtensor();
      EXPECT_NE(d.local().storage(), d0.local().storage());
      EXPECT_TRUE(d.local().device().is_cpu());
      EXPECT_EQ(d.placements(), d0.placements());
    }
  }
}

TEST(CreateCpuStateDict, MetaTensorsBecomeZerosSharedWhenAsked) {
  const Map sd{{"m", *Tensor::Meta({2, 2}, DType::kFloat32)}, {"w", Arange({3})}};
  for (bool share : {false, true}) {
    absl::StatusOr<Map> out = CreateCpuStateDict(sd, CreateCpuOptions{false, share});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& m = out->Find("m")->as_tensor();
    EXPECT_TRUE(m.device().is_cpu());
    EXPECT_EQ(Floats(m), std::vector<float>(4, 0.0f));
    EXPECT_EQ(m.storage()->kind(), share ? StorageKind::kShared : StorageKind::kCpu);
    EXPECT_NE(m.storage(), out->Find("w")->as_tensor().storage());  // not in the arena
  }
}

TEST(CreateCpuStateDict, DistributedTypesKeepTheirMetadata) {
  const DTensor d = ShardedRows(Arange({2, 3}), 4);
  const ShardedTensor st = testing_ops::SpecShardedTensor(1, 2);
  const ShardedTensor no_shards =
      *ShardedTensor::Make(st.global_shape(), st.dtype(), st.shards_metadata(), {});
  absl::StatusOr<Map> out = CreateCpuStateDict(Map{{"d", d}, {"st", st}, {"empty", no_shards}});
  ASSERT_TRUE(out.ok()) << out.status();
  const DTensor& cd = out->Find("d")->as_dtensor();
  EXPECT_EQ(*cd.mesh(), *d.mesh());
  EXPECT_EQ(cd.placements(), d.placements());
  EXPECT_EQ(cd.global_shape(), d.global_shape());
  EXPECT_EQ(cd.global_stride(), d.global_stride());
  EXPECT_EQ(cd.local().shape(), d.local().shape());
  EXPECT_NE(cd.local().storage(), d.local().storage());
  const ShardedTensor& cst = out->Find("st")->as_sharded();
  EXPECT_EQ(cst.global_shape(), st.global_shape());
  ASSERT_EQ(cst.shards_metadata().size(), 2u);
  EXPECT_EQ(cst.shards_metadata()[1].offsets, (IntVector{5, 0}));
  EXPECT_EQ(cst.local_shards()[0].metadata.placement.ToString(), "rank:1/cpu");
  EXPECT_NE(cst.local_shards()[0].tensor.storage(), st.local_shards()[0].tensor.storage());
  // Without local shards: returned as is.
  EXPECT_TRUE(out->Find("empty")->as_sharded().local_shards().empty());
}

TEST(CreateCpuStateDict, OpaqueValuesAreClonedBytesIOShared) {
  const Map sd{{"o", Unknown("Foo")}, {"io", BytesIO("abc")}, {"b", Bytes{"\x01"}}, {"lr", 1.5}};
  absl::StatusOr<Map> out = CreateCpuStateDict(sd);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->Find("o")->as_opaque().object, sd.Find("o")->as_opaque().object);
  EXPECT_EQ(out->Find("io")->as_opaque().object, sd.Find("io")->as_opaque().object);
  EXPECT_TRUE(*out->Find("b") == *sd.Find("b"));
  EXPECT_EQ(out->Find("lr")->as_double(), 1.5);
}

TEST(CreateCpuStateDict, PinningWithoutADeviceNamesTheArena) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "pinning works here; see state_dict_ops_gpu_test";
  absl::StatusOr<Map> out =
      CreateCpuStateDict(Map{{"w", Arange({4})}}, CreateCpuOptions{true, false});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      std::string(out.status().message()),
      HasSubstr("CreateCpuStateDict: the 16-byte arena (pinned, not shared) for 1 tensors"));
}

// docs/SEMANTICS.md 9 item 5 (test_create_cpu_state_dict) re-expressed on CPU for flags none and
// share.
TEST(CreateCpuStateDict, CreateCompareCopySpec9Item5) {
  const Map source{{"tensor1", Arange({10})},
                   {"tensor2", Full({10}, 1.0f)},
                   {"sharded", testing_ops::SpecShardedTensor(0, 2)},
                   {"dtensor", ShardedRows(Arange({5, 10}), 2)},
                   {"bytes_io", BytesIO("contents")},
                   {"bytes", Bytes{std::string("\x00\x01\x02", 3)}},
                   {"step", Scalar(7.0f)},
                   {"lr", 1.5},
                   {"nested", Map{{"list", List{1, 2, 3, 4}}}}};
  for (bool share : {false, true}) {
    absl::StatusOr<Map> cpu = CreateCpuStateDict(source, CreateCpuOptions{false, share});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_TRUE(CheckStateDictSimilarity(source, *cpu));
    Map swapped = source;
    swapped.Set("tensor1", Arange({11}));
    EXPECT_FALSE(CheckStateDictSimilarity(swapped, *cpu));
    EXPECT_THAT(std::string(CompareStateDicts(swapped, *cpu).message()),
                HasSubstr("at tensor1: source float32[11], companion float32[10]"));

    absl::StatusOr<CopyResult> copied = CopyStateDict(source, *cpu);
    ASSERT_TRUE(copied.ok()) << copied.status();
    const Map& out = copied->state_dict;
    EXPECT_TRUE(Value(out) == Value(source)) << DebugString(Value(out));
    std::vector<Tensor> made;
    std::vector<Tensor> sources;
    CollectTensors(Value(out), &made);
    CollectTensors(Value(source), &sources);
    ASSERT_EQ(made.size(), sources.size());
    for (size_t i = 0; i < made.size(); ++i) {
      EXPECT_TRUE(made[i].device().is_cpu());
      EXPECT_NE(made[i].storage(), sources[i].storage()) << i;
    }
    EXPECT_EQ(Floats(out.Find("step")->as_tensor()), std::vector<float>{7.0f});
    EXPECT_EQ(*std::static_pointer_cast<std::string>(out.Find("bytes_io")->as_opaque().object),
              "contents");
  }
}

}  // namespace
}  // namespace sdrt
