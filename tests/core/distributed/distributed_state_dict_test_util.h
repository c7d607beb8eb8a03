// Helpers of the multi-rank tests of core/distributed/distributed_state_dict.h: rank agreement,
// full tensors whose elements are functions of their global index, state dicts built leaf by leaf
// from one description (Spec) in each of the forms the operations take and give, and tree
// comparisons that name the first differing path. Test code only; every binary including it sets
// g_world (RunMpiTests).
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_DISTRIBUTED_STATE_DICT_TEST_UTIL_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_DISTRIBUTED_STATE_DICT_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::test {

inline MpiCommunicator* g_world = nullptr;

inline int Rank() { return g_world->rank(); }
inline int WorldSize() { return g_world->size(); }

// ---------------------------------------------------------------------------------------
// Rank agreement.

// True on every rank when `ok` is true on every rank (one all-reduce).
inline bool AllTrue(bool ok) {
  Tensor t = *Tensor::Empty({1}, DType::kInt32);
  t.data<int32_t>()[0] = ok ? 1 : 0;
  const absl::Status s = g_world->AllReduce(t, ReduceOp::kMin);
  if (!s.ok()) {
    ADD_FAILURE() << "AllTrue: " << s;
    return false;
  }
  return t.data<int32_t>()[0] == 1;
}

// Every rank goes on only when no rank has failed so far in this test.
// Options of each operation on the world communicator.
inline GatherOptions WorldGather() {
  GatherOptions options;
  options.comm = g_world;
  return options;
}
inline BroadcastOptions WorldBroadcast() {
  BroadcastOptions options;
  options.comm = g_world;
  return options;
}

inline bool NoRankFailed() { return AllTrue(!::testing::Test::HasFailure()); }

// Checks that every rank got exactly this status (code and message).
inline void ExpectSameStatusOnEveryRank(const absl::Status& status) {
  absl::StatusOr<std::vector<std::string>> all = g_world->AllGatherBytes(status.ToString());
  ASSERT_TRUE(all.ok()) << all.status();
  for (int r = 0; r < WorldSize(); ++r) {
    EXPECT_EQ((*all)[r], status.ToString()) << "rank " << r << " got another status";
  }
}

// ---------------------------------------------------------------------------------------
// Values.

// Full tensors are test::ValuePattern(shape, dtype, salt) (tests/support/fill.h): element
// i holds an exact value made from 3 i + salt.

// A salt from a path, the same on every rank and in every tree built from it.
inline int64_t SaltOf(absl::string_view path) {
  int64_t salt = 0;
  for (char c : path) salt = (salt * 31 + static_cast<unsigned char>(c)) % 9973;
  return salt;
}

inline std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

inline std::vector<Placement> PlacementsOf(const char* text) { return *ParsePlacements(text); }

// The box [offsets, offsets + sizes) of `full` as a new contiguous tensor.
inline Tensor Box(const Tensor& full, IntSpan offsets, IntSpan sizes) {
  for (int64_t s : sizes) {
    if (s == 0) return *Tensor::Zeros(sizes, full.dtype());
  }
  Tensor view = full;
  for (int d = 0; d < full.dim(); ++d) view = *view.Narrow(d, offsets[d], sizes[d]);
  return *view.Clone();
}

// ---------------------------------------------------------------------------------------
// Comparisons.

// dtype, shape, device and bytes equal (`got` may be strided; meta tensors by metadata).
inline void ExpectSameTensor(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined tensor";
  EXPECT_EQ(got.device(), want.device()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what << ": shape " << ShapeToString(got.shape())
                                       << ", want " << ShapeToString(want.shape());
  if (want.numel() == 0 || want.is_meta()) return;
  ASSERT_FALSE(got.is_meta()) << what << ": meta tensor";
  const Tensor g = *got.Contiguous();
  const Tensor w = *want.Contiguous();
  const int64_t elem = (ElementBits(w.dtype()) / 8);
  const char* gp = static_cast<const char*>(g.data_ptr());
  const char* wp = static_cast<const char*>(w.data_ptr());
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (std::memcmp(gp + i * elem, wp + i * elem, elem) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << DTypeName(w.dtype())
                    << ShapeToString(w.shape()) << " differs (first of "
                    << "the differing elements)";
      return;
    }
  }
}

inline IntVector StrideOrContiguous(const IntVector& stride, const IntVector& shape) {
  return stride.empty() ? ContiguousStrides(shape) : stride;
}

// Structure and values equal, with the first differing path in the failure.
inline void ExpectTreeEq(const Value& got, const Value& want, const std::string& path) {
  ASSERT_EQ(ValueKindName(got.kind()), ValueKindName(want.kind())) << "at '" << path << "'";
  const auto child = [&](absl::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  };
  switch (got.kind()) {
    case ValueKind::kMap: {
      const Map& g = got.as_map();
      const Map& w = want.as_map();
      ASSERT_EQ(std::vector<std::string>(g.keys().begin(), g.keys().end()),
                std::vector<std::string>(w.keys().begin(), w.keys().end()))
          << "keys at '" << path << "'";
      for (size_t i = 0; i < g.size(); ++i) ExpectTreeEq(g.value(i), w.value(i), child(g.key(i)));
      return;
    }
    case ValueKind::kList:
    case ValueKind::kTuple:
      ASSERT_EQ(got.items().size(), want.items().size()) << "at '" << path << "'";
      for (size_t i = 0; i < got.items().size(); ++i) {
        ExpectTreeEq(got.items()[i], want.items()[i], child(absl::StrCat(i)));
      }
      return;
    case ValueKind::kTensor:
      ExpectSameTensor(got.as_tensor(), want.as_tensor(), path);
      return;
    case ValueKind::kDTensor: {
      const DTensor& g = got.as_dtensor();
      const DTensor& w = want.as_dtensor();
      EXPECT_EQ(*g.mesh(), *w.mesh()) << path;
      EXPECT_EQ(PlacementsToString(g.placements()), PlacementsToString(w.placements())) << path;
      EXPECT_EQ(g.global_shape(), w.global_shape()) << path;
      EXPECT_EQ(StrideOrContiguous(g.global_stride(), g.global_shape()),
                StrideOrContiguous(w.global_stride(), w.global_shape()))
          << path;
      ExpectSameTensor(g.local(), w.local(), absl::StrCat(path, " (local)"));
      return;
    }
    case ValueKind::kShardedTensor: {
      const ShardedTensor& g = got.as_sharded();
      const ShardedTensor& w = want.as_sharded();
      EXPECT_EQ(g.global_shape(), w.global_shape()) << path;
      EXPECT_EQ(g.dtype(), w.dtype()) << path;
      ASSERT_EQ(g.shards_metadata().size(), w.shards_metadata().size()) << path;
      for (size_t i = 0; i < g.shards_metadata().size(); ++i) {
        EXPECT_EQ(g.shards_metadata()[i].ToString(), w.shards_metadata()[i].ToString()) << path;
      }
      ASSERT_EQ(g.local_shards().size(), w.local_shards().size()) << path;
      for (size_t i = 0; i < g.local_shards().size(); ++i) {
        EXPECT_EQ(g.local_shards()[i].metadata.ToString(), w.local_shards()[i].metadata.ToString());
        ExpectSameTensor(g.local_shards()[i].tensor, w.local_shards()[i].tensor,
                         absl::StrCat(path, " local shard ", i));
      }
      return;
    }
    default:
      EXPECT_TRUE(got == want) << "at '" << path << "': " << DebugString(got) << " vs "
                               << DebugString(want);
  }
}

// The value at a dotted path ("layers.0.w") of a map; fails the test (returning None)
// when the path is not there.
inline const Value& At(const Map& root, absl::string_view dotted) {
  static const Value* const kNone = new Value();
  const std::vector<std::string> parts = absl::StrSplit(dotted, '.');
  const Value* v = nullptr;
  const Map* m = &root;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (m != nullptr) {
      v = m->Find(parts[i]);
    } else if (v != nullptr && v->is_sequence()) {
      const size_t index = std::stoul(parts[i]);
      v = index < v->items().size() ? &v->items()[index] : nullptr;
    } else {
      v = nullptr;
    }
    if (v == nullptr) {
      ADD_FAILURE() << "no '" << dotted << "'";
      return *kNone;
    }
    m = v->is_map() ? &v->as_map() : nullptr;
  }
  return *v;
}

// The data pointer of a plain tensor's, a DTensor's local or a ShardedTensor's first local
// shard's bytes; nullptr for anything else.
inline const void* DataPtr(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kTensor:
      return v.as_tensor().data_ptr();
    case ValueKind::kDTensor:
      return v.as_dtensor().local().data_ptr();
    case ValueKind::kShardedTensor:
      return v.as_sharded().local_shards().empty()
                 ? nullptr
                 : v.as_sharded().local_shards()[0].tensor.data_ptr();
    default:
      return nullptr;
  }
}

// Bytes of the tensors of dimension >= 1 of a tree (what a broadcast moves in buckets;
// 0-dim tensors travel with the skeleton).
inline int64_t TensorBytes(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kTensor:
      return v.as_tensor().dim() > 0 ? v.as_tensor().nbytes() : 0;
    case ValueKind::kMap: {
      int64_t sum = 0;
      for (size_t i = 0; i < v.as_map().size(); ++i) sum += TensorBytes(v.as_map().value(i));
      return sum;
    }
    case ValueKind::kList:
    case ValueKind::kTuple: {
      int64_t sum = 0;
      for (const Value& item : v.items()) sum += TensorBytes(item);
      return sum;
    }
    default:
      return 0;
  }
}

// Number of tensors of dimension >= 1 of a tree.
inline int64_t TensorCount(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kTensor:
      return v.as_tensor().dim() > 0 ? 1 : 0;
    case ValueKind::kMap: {
      int64_t sum = 0;
      for (size_t i = 0; i < v.as_map().size(); ++i) sum += TensorCount(v.as_map().value(i));
      return sum;
    }
    case ValueKind::kList:
    case ValueKind::kTuple: {
      int64_t sum = 0;
      for (const Value& item : v.items()) sum += TensorCount(item);
      return sum;
    }
    default:
      return 0;
  }
}

// ---------------------------------------------------------------------------------------
// State dicts built leaf by leaf.

// One tensor leaf: its path, global shape and dtype, and how it is distributed.
struct Spec {
  enum class Kind { kPlain, kDTensor, kSharded };
  std::string path;
  IntVector shape;
  DType dtype = DType::kFloat32;
  Kind kind = Kind::kPlain;
  std::shared_ptr<const DeviceMesh> mesh;  // kDTensor
  std::vector<Placement> placements;       // kDTensor
  std::vector<ShardMetadata> shards;       // kSharded

  Tensor Full() const { return ValuePattern(shape, dtype, SaltOf(path)); }
  IntVector LocalShape() const { return *ComputeLocalShape(shape, *mesh, placements, Rank()); }
  bool HasPartial() const {
    for (const Placement& p : placements) {
      if (p.is_partial()) return true;
    }
    return false;
  }
};

using LeafFn = std::function<Value(const Spec&)>;

inline Spec PlainSpec(std::string path, IntSpan shape, DType dtype) {
  Spec s;
  s.path = std::move(path);
  s.shape = IntVector(shape.begin(), shape.end());
  s.dtype = dtype;
  return s;
}

inline Spec DSpec(std::string path, IntSpan shape, DType dtype,
                  std::shared_ptr<const DeviceMesh> mesh, const char* placements) {
  Spec s = PlainSpec(std::move(path), shape, dtype);
  s.kind = Spec::Kind::kDTensor;
  s.mesh = std::move(mesh);
  s.placements = PlacementsOf(placements);
  return s;
}

inline Spec SSpec(std::string path, IntSpan shape, DType dtype, std::vector<ShardMetadata> shards) {
  Spec s = PlainSpec(std::move(path), shape, dtype);
  s.kind = Spec::Kind::kSharded;
  s.shards = std::move(shards);
  return s;
}

// FSDP1's layout: ChunkShardingSpec(dim) over ranks 0..N-1 (trailing shards may be empty).
inline std::vector<ShardMetadata> ChunkShards(IntSpan shape, int dim) {
  std::vector<RemoteDevice> placements;
  for (int r = 0; r < WorldSize(); ++r) placements.push_back({r, Device::CPU()});
  return *ChunkShardingSpec(dim, placements, shape);
}

// case-002's metadata: 1-D length 8, sizes 3,0,2,0,1,0,0,2 at offsets 0,3,3,5,5,6,6,6,
// shard i on rank owner(i).
inline std::vector<ShardMetadata> Case002Shards(int (*owner)(int, int)) {
  const int64_t offsets[] = {0, 3, 3, 5, 5, 6, 6, 6};
  const int64_t sizes[] = {3, 0, 2, 0, 1, 0, 0, 2};
  std::vector<ShardMetadata> shards;
  for (int i = 0; i < 8; ++i) {
    shards.push_back({{offsets[i]}, {sizes[i]}, {owner(i, WorldSize()), Device::CPU()}});
  }
  return shards;
}
inline int RoundRobin(int i, int n) { return i % n; }
inline int RoundRobinSparingLastRank(int i, int n) { return n == 1 ? 0 : n - 2 - i % (n - 1); }

// The ShardedTensor of `spec` seen from this rank: local shards are the boxes of `full`
// (zeros when `full` is null), listed last-first so that placing must follow metadata.
inline ShardedTensor MakeSharded(const Spec& spec, const Tensor* full) {
  std::vector<LocalShard> local;
  for (const ShardMetadata& m : spec.shards) {
    if (m.placement.rank != Rank()) continue;
    Tensor t =
        full != nullptr ? Box(*full, m.offsets, m.sizes) : *Tensor::Zeros(m.sizes, spec.dtype);
    local.insert(local.begin(), LocalShard{t, m});
  }
  absl::StatusOr<ShardedTensor> st =
      ShardedTensor::Make(spec.shape, spec.dtype, spec.shards, std::move(local));
  EXPECT_TRUE(st.ok()) << st.status();
  return st.ok() ? *st : ShardedTensor();
}

// What each operation takes and gives, per leaf.

// The checkpoint leaf and the gather result: the full tensor.
inline Value FullLeaf(const Spec& s) { return s.Full(); }

// A rank's distributed leaf: DistributeTensor's DTensor, the ShardedTensor with its local
// shards, or the plain full tensor.
inline Value ShardedLeaf(const Spec& s) {
  switch (s.kind) {
    case Spec::Kind::kPlain:
      return s.Full();
    case Spec::Kind::kDTensor: {
      absl::StatusOr<DTensor> dt = DistributeTensor(s.Full(), s.mesh, s.placements, Rank());
      EXPECT_TRUE(dt.ok()) << s.path << ": " << dt.status();
      return dt.ok() ? Value(*dt) : Value();
    }
    case Spec::Kind::kSharded: {
      const Tensor full = s.Full();
      return MakeSharded(s, &full);
    }
  }
  return Value();
}

// A broadcast target without data: meta DTensors, ShardedTensors of zeros, and for plain
// leaves None (odd salts) or zeros.
inline Value MetaLeaf(const Spec& s) {
  switch (s.kind) {
    case Spec::Kind::kPlain:
      if (!s.shape.empty() && SaltOf(s.path) % 2 == 1) return None{};
      return *Tensor::Zeros(s.shape, s.dtype);
    case Spec::Kind::kDTensor:
      return *DTensor::Make(*Tensor::Meta(s.LocalShape(), s.dtype), s.mesh, s.placements, s.shape);
    case Spec::Kind::kSharded:
      return MakeSharded(s, nullptr);
  }
  return Value();
}

// A broadcast target with data to overwrite in place: zero locals everywhere.
inline Value ZeroLeaf(const Spec& s) {
  switch (s.kind) {
    case Spec::Kind::kPlain:
      return *Tensor::Zeros(s.shape, s.dtype);
    case Spec::Kind::kDTensor:
      return *DTensor::Make(*Tensor::Zeros(s.LocalShape(), s.dtype), s.mesh, s.placements, s.shape);
    case Spec::Kind::kSharded:
      return MakeSharded(s, nullptr);
  }
  return Value();
}

// What a broadcast or distribute leaves in ZeroLeaf's tree: DTensors with this rank's
// piece (DistributeTensor's, Partial included), filled ShardedTensors, plain full tensors;
// a 0-dim leaf becomes the plain 0-dim tensor.
inline Value ExpectedPieceLeaf(const Spec& s) {
  if (s.kind == Spec::Kind::kDTensor && !s.shape.empty()) return ShardedLeaf(s);
  if (s.kind == Spec::Kind::kSharded) return ShardedLeaf(s);
  return s.Full();
}

// What a broadcast or distribute leaves in MetaLeaf's tree: as ExpectedPieceLeaf, except
// that a None local leaf takes no tensor and stays None (PyTorch's _broadcast_tensors and
// _distribute_state_dict skip it).
inline Value ExpectedFromMetaLeaf(const Spec& s) {
  if (MetaLeaf(s).is_none()) return None{};
  return ExpectedPieceLeaf(s);
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_DISTRIBUTED_STATE_DICT_TEST_UTIL_H_
