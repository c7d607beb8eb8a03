// Multi-rank tests of Communicator over MPI. CTest runs this binary under
// `mpiexec -n N` for N = 1, 2, 3, 4; every rank runs every test, and data is derived from
// (seed, rank, index) so each rank checks its own result. Rank 0 prints GoogleTest's usual
// output; other ranks print only their failures.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/internal/mpi_check.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tests/support/mpi_test_main.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using test::FillHashBytes;
using test::HashByte;
using test::kWholeByteDTypes;
using ::testing::HasSubstr;
using ::testing::Test;

MpiCommunicator* g_world = nullptr;

// Rank `rank`'s data in test `seed` is FillHashBytes(t, seed, rank): byte i is
// HashByte(seed, rank, i). Index of the first byte of `data` (`nbytes` long) that differs
// from it, or -1.
int64_t FirstWrongByte(const void* data, int64_t nbytes, uint64_t seed, int rank) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < nbytes; ++i) {
    if (bytes[i] != HashByte(seed, rank, i)) return i;
  }
  return -1;
}

Tensor Make(IntSpan shape, DType dtype) { return *Tensor::Empty(shape, dtype); }

TEST(CommunicatorMpi, RankAndSize) {
  EXPECT_GE(g_world->size(), 1);
  EXPECT_GE(g_world->rank(), 0);
  EXPECT_LT(g_world->rank(), g_world->size());
  EXPECT_EQ(g_world->backend(), "mpi");
  EXPECT_EQ(g_world->device(), Device::CPU());
}

TEST(CommunicatorMpi, AllGatherEveryDType) {
  const int n = g_world->size();
  for (DType dtype : kWholeByteDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const uint64_t seed = 100 + static_cast<int>(dtype);
    Tensor input = Make({2, 3}, dtype);
    FillHashBytes(input, seed, g_world->rank());
    Tensor output = Make({n, 2, 3}, dtype);
    ASSERT_TRUE(g_world->AllGather(output, input).ok());
    for (int r = 0; r < n; ++r) {
      const char* slot = static_cast<const char*>(output.data_ptr()) + r * input.nbytes();
      EXPECT_EQ(FirstWrongByte(slot, input.nbytes(), seed, r), -1) << "from rank " << r;
    }
  }
}

TEST(CommunicatorMpi, AllGatherInPlace) {
  const int n = g_world->size();
  Tensor output = Make({n, 5}, DType::kInt64);
  std::memset(output.data_ptr(), 0, output.nbytes());
  Tensor mine = *output.Narrow(0, g_world->rank(), 1);
  FillHashBytes(mine, 7, g_world->rank());
  ASSERT_TRUE(g_world->AllGather(output, mine).ok());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(FirstWrongByte(output.data<int64_t>() + 5 * r, 40, 7, r), -1) << "rank " << r;
  }
}

// case-003: every rank contributes a (1, 0, 2) tensor.
TEST(CommunicatorMpi, AllGatherOfZeroElements) {
  Tensor input = Make({1, 0, 2}, DType::kFloat32);
  Tensor output = Make({g_world->size(), 0, 2}, DType::kFloat32);
  EXPECT_TRUE(g_world->AllGather(output, input).ok());
  EXPECT_EQ(output.shape(), (IntVector{g_world->size(), 0, 2}));
  EXPECT_TRUE(g_world->Barrier().ok());
}

// Rank r contributes counts[r] elements; odd ranks contribute none.
std::vector<int64_t> UnevenCounts(int n) {
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r % 2 == 1 ? 0 : 3 * r + 2);
  return counts;
}

void CheckAllGatherV(Communicator& comm, uint64_t seed, DType dtype) {
  const std::vector<int64_t> counts = UnevenCounts(comm.size());
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor input = Make({counts[comm.rank()]}, dtype);
  FillHashBytes(input, seed, comm.rank());
  Tensor output = Make({total}, dtype);
  ASSERT_TRUE(comm.AllGatherV(output, input, counts).ok());
  int64_t offset = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const char* slot = static_cast<const char*>(output.data_ptr()) + offset * (ElementBits(input.dtype()) / 8);
    EXPECT_EQ(FirstWrongByte(slot, counts[r] * (ElementBits(input.dtype()) / 8), seed, r), -1) << "rank " << r;
    offset += counts[r];
  }
}

TEST(CommunicatorMpi, AllGatherVUnevenWithEmptyRanks) {
  CheckAllGatherV(*g_world, 11, DType::kFloat32);
  CheckAllGatherV(*g_world, 12, DType::kBFloat16);
  CheckAllGatherV(*g_world, 13, DType::kFloat8E5M2);
}

TEST(CommunicatorMpi, AllGatherVAllEmpty) {
  const std::vector<int64_t> counts(g_world->size(), 0);
  Tensor input = Make({0}, DType::kInt32);
  Tensor output = Make({0}, DType::kInt32);
  EXPECT_TRUE(g_world->AllGatherV(output, input, counts).ok());
}

// A copy of the world whose messages are at most 5 bytes, so every transfer is split.
std::unique_ptr<Communicator> SmallMessageCopy() {
  absl::StatusOr<std::unique_ptr<Communicator>> copy = g_world->Split(0, g_world->rank());
  EXPECT_TRUE(copy.ok()) << copy.status();
  auto* mpi = static_cast<MpiCommunicator*>(copy->get());
  mpi->set_max_message_bytes(5);
  return *std::move(copy);
}

TEST(CommunicatorMpi, SplitMessages) {
  std::unique_ptr<Communicator> comm = SmallMessageCopy();
  CheckAllGatherV(*comm, 21, DType::kInt16);
  const int n = comm->size();
  Tensor input = Make({3}, DType::kFloat32);
  FillHashBytes(input, 22, comm->rank());
  Tensor output = Make({n, 3}, DType::kFloat32);
  ASSERT_TRUE(comm->AllGather(output, input).ok());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(FirstWrongByte(output.data<float>() + 3 * r, 12, 22, r), -1) << "rank " << r;
  }
  Tensor sum = Make({7}, DType::kInt64);
  for (int i = 0; i < 7; ++i) sum.data<int64_t>()[i] = i + comm->rank();
  ASSERT_TRUE(comm->AllReduce(sum, ReduceOp::kSum).ok());
  for (int i = 0; i < 7; ++i) EXPECT_EQ(sum.data<int64_t>()[i], n * i + n * (n - 1) / 2);
  std::string bytes = comm->rank() == 0 ? std::string("split into many messages") : "";
  ASSERT_TRUE(comm->BroadcastBytes(&bytes, 0).ok());
  EXPECT_EQ(bytes, "split into many messages");
}

void CheckGroupedBroadcast(int root, uint64_t seed) {
  const int rank = g_world->rank();
  std::vector<Tensor> tensors = {Make({3, 5}, DType::kFloat32), Make({7}, DType::kInt64),
                                 Make({0}, DType::kUInt8), Make({2, 2, 2}, DType::kBFloat16),
                                 Make({1}, DType::kFloat8E4M3FN)};
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (rank == root) {
      FillHashBytes(tensors[i], seed + i, root);
    } else if (tensors[i].nbytes() > 0) {  // an empty tensor has no data pointer
      std::memset(tensors[i].data_ptr(), 0, tensors[i].nbytes());
    }
  }
  ASSERT_TRUE(g_world->Broadcast(absl::MakeSpan(tensors), root).ok());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(FirstWrongByte(tensors[i].data_ptr(), tensors[i].nbytes(), seed + i, root), -1)
        << "tensor " << i << " from root " << root;
  }
}

TEST(CommunicatorMpi, GroupedBroadcastFromFirstAndLastRank) {
  CheckGroupedBroadcast(0, 30);
  CheckGroupedBroadcast(g_world->size() - 1, 40);
}

// All-reduce inputs: small integers, so that float32 (and the 16-bit floats, whose values
// and partial results stay below 2^8) accumulate exactly and the oracle is exact.
double Value(ReduceOp op, int rank, int i) {
  if (op == ReduceOp::kProduct) return 1 + (i + rank) % 3;  // <= 3^4 = 81 over 4 ranks
  return (i % 5) - 2 + 3 * rank;
}

double Expected(ReduceOp op, int n, int i) {
  double result = Value(op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Value(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        result += v;
        break;
      case ReduceOp::kProduct:
        result *= v;
        break;
      case ReduceOp::kMin:
        result = std::min(result, v);
        break;
      case ReduceOp::kMax:
        result = std::max(result, v);
        break;
    }
  }
  return result;
}

constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};
constexpr int kReduceNumel = 11;

// Two communicators used by two threads at once, as an engine with a load thread and a
// sync thread does: with MPI_THREAD_SERIALIZED, MPICH's UCX transport aborted on an
// assertion (a new user's try of the C API). Each thread's sums are its own.
TEST(CommunicatorMpi, TwoCommunicatorsOnTwoThreadsAtOnce) {
  int level = 0;
  ASSERT_EQ(MPI_Query_thread(&level), MPI_SUCCESS);
  ASSERT_EQ(level, MPI_THREAD_MULTIPLE);  // World() initialized MPI (mpi_test_main.h)
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> other = MpiCommunicator::World();
  ASSERT_TRUE(other.ok()) << other.status();
  const int n = g_world->size();
  auto run = [n](Communicator* comm, int64_t base, int* wrong) {
    for (int step = 0; step < 200; ++step) {
      Tensor t = Make({64}, DType::kInt64);
      for (int i = 0; i < 64; ++i) t.data<int64_t>()[i] = base + step + i + comm->rank();
      if (!comm->AllReduce(t, ReduceOp::kSum).ok()) {
        ++*wrong;
        return;
      }
      for (int i = 0; i < 64; ++i) {
        *wrong += t.data<int64_t>()[i] != n * (base + step + i) + n * (n - 1) / 2;
      }
    }
  };
  int wrong_a = 0, wrong_b = 0;
  std::thread a(run, g_world, 0, &wrong_a);
  std::thread b(run, other->get(), 1'000'000, &wrong_b);
  a.join();
  b.join();
  EXPECT_EQ(wrong_a, 0);
  EXPECT_EQ(wrong_b, 0);
}

TEST(CommunicatorMpi, AllReduceFloat32) {
  const int n = g_world->size();
  for (ReduceOp op : kAllOps) {
    SCOPED_TRACE(ReduceOpName(op));
    Tensor t = Make({kReduceNumel}, DType::kFloat32);
    for (int i = 0; i < kReduceNumel; ++i) t.data<float>()[i] = Value(op, g_world->rank(), i);
    ASSERT_TRUE(g_world->AllReduce(t, op).ok());
    for (int i = 0; i < kReduceNumel; ++i) {
      float expected = static_cast<float>(Expected(op, n, i));
      if (op == ReduceOp::kAvg) expected /= static_cast<float>(n);
      EXPECT_EQ(t.data<float>()[i], expected) << "element " << i;
    }
  }
}

TEST(CommunicatorMpi, AllReduceInt64) {
  const int n = g_world->size();
  for (ReduceOp op : kAllOps) {
    SCOPED_TRACE(ReduceOpName(op));
    Tensor t = Make({kReduceNumel}, DType::kInt64);
    for (int i = 0; i < kReduceNumel; ++i) {
      t.data<int64_t>()[i] = static_cast<int64_t>(Value(op, g_world->rank(), i));
    }
    ASSERT_TRUE(g_world->AllReduce(t, op).ok());
    for (int i = 0; i < kReduceNumel; ++i) {
      int64_t expected = static_cast<int64_t>(Expected(op, n, i));
      if (op == ReduceOp::kAvg) expected /= n;  // truncates toward zero
      EXPECT_EQ(t.data<int64_t>()[i], expected) << "element " << i;
    }
  }
}

// `to_bits` / `from_bits` are the float16 or bfloat16 conversions.
void CheckAllReduce16(DType dtype, uint16_t (*to_bits)(float), float (*from_bits)(uint16_t)) {
  const int n = g_world->size();
  for (ReduceOp op : kAllOps) {
    SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op)));
    Tensor t = Make({kReduceNumel}, dtype);
    for (int i = 0; i < kReduceNumel; ++i) {
      t.data<uint16_t>()[i] = to_bits(static_cast<float>(Value(op, g_world->rank(), i)));
    }
    ASSERT_TRUE(g_world->AllReduce(t, op).ok());
    for (int i = 0; i < kReduceNumel; ++i) {
      float expected = static_cast<float>(Expected(op, n, i));
      if (op == ReduceOp::kAvg) expected = from_bits(to_bits(expected)) / static_cast<float>(n);
      EXPECT_EQ(t.data<uint16_t>()[i], to_bits(expected)) << "element " << i;
    }
  }
}

TEST(MpiCheck, ReturnCodesBecomeStatuses) {
  EXPECT_TRUE(SDRT_MPI_STATUS(MPI_SUCCESS).ok());
  const absl::Status count = SDRT_MPI_STATUS(MPI_ERR_COUNT);
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(count.message(), HasSubstr("MPI_ERR_COUNT failed at "));
  EXPECT_THAT(count.message(), HasSubstr("communicator_mpi_test.cc:"));
  EXPECT_EQ(SDRT_MPI_STATUS(MPI_ERR_NO_MEM).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(SDRT_MPI_STATUS(MPI_ERR_OTHER).code(), absl::StatusCode::kInternal);
}

// The conversions the 16-bit reductions and the oracle above use.
TEST(Float16Conversions, KnownBitsAndRoundTrip) {
  EXPECT_EQ(internal::FloatToFloat16(1.0f), 0x3c00);
  EXPECT_EQ(internal::FloatToFloat16(-2.0f), 0xc000);
  EXPECT_EQ(internal::FloatToFloat16(0.1f), 0x2e66);
  EXPECT_EQ(internal::FloatToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(internal::FloatToFloat16(65520.0f), 0x7c00);       // ties to even: infinity
  EXPECT_EQ(internal::FloatToFloat16(5.9604645e-8f), 0x0001);  // 2^-24, smallest subnormal
  EXPECT_EQ(internal::FloatToFloat16(2049.0f), 0x6800);        // tie rounds to even 2048
  EXPECT_EQ(internal::FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(internal::FloatToBFloat16(0.1f), 0x3dcd);
  EXPECT_EQ(internal::FloatToBFloat16(257.0f), 0x4380);  // tie rounds to even 256
  EXPECT_TRUE(std::isnan(internal::BFloat16ToFloat(internal::FloatToBFloat16(NAN))));
  EXPECT_TRUE(std::isnan(internal::Float16ToFloat(internal::FloatToFloat16(NAN))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f16 = internal::Float16ToFloat(h);
    if (!std::isnan(f16)) {
      EXPECT_EQ(internal::FloatToFloat16(f16), h) << "float16 " << bits;
    }
    const float bf16 = internal::BFloat16ToFloat(h);
    if (!std::isnan(bf16)) {
      EXPECT_EQ(internal::FloatToBFloat16(bf16), h) << "bfloat16 " << bits;
    }
  }
}

TEST(CommunicatorMpi, AllReduceBFloat16) {
  CheckAllReduce16(DType::kBFloat16, &internal::FloatToBFloat16, &internal::BFloat16ToFloat);
}

TEST(CommunicatorMpi, AllReduceFloat16) {
  CheckAllReduce16(DType::kFloat16, &internal::FloatToFloat16, &internal::Float16ToFloat);
}

TEST(CommunicatorMpi, AllReduceBoolSumIsOrProductIsAnd) {
  // Element 0: true only on rank 0; element 1: true everywhere; element 2: false everywhere.
  Tensor sum = Make({3}, DType::kBool);
  sum.data<uint8_t>()[0] = g_world->rank() == 0;
  sum.data<uint8_t>()[1] = 1;
  sum.data<uint8_t>()[2] = 0;
  Tensor product = *sum.Clone();
  ASSERT_TRUE(g_world->AllReduce(sum, ReduceOp::kSum).ok());
  ASSERT_TRUE(g_world->AllReduce(product, ReduceOp::kProduct).ok());
  EXPECT_EQ(sum.data<uint8_t>()[0], 1);
  EXPECT_EQ(sum.data<uint8_t>()[1], 1);
  EXPECT_EQ(sum.data<uint8_t>()[2], 0);
  EXPECT_EQ(product.data<uint8_t>()[0], g_world->size() == 1 ? 1 : 0);
  EXPECT_EQ(product.data<uint8_t>()[1], 1);
  EXPECT_EQ(product.data<uint8_t>()[2], 0);
}

TEST(CommunicatorMpi, BroadcastBytes) {
  for (int root : {0, g_world->size() - 1}) {
    const std::string message = absl::StrCat("from root ", root, std::string(1000, 'x'));
    std::string bytes = g_world->rank() == root ? message : "stale contents";
    ASSERT_TRUE(g_world->BroadcastBytes(&bytes, root).ok());
    EXPECT_EQ(bytes, message);
  }
  std::string empty = g_world->rank() == 0 ? "" : "stale";
  ASSERT_TRUE(g_world->BroadcastBytes(&empty, 0).ok());
  EXPECT_EQ(empty, "");
}

TEST(CommunicatorMpi, AllGatherBytes) {
  // Rank r sends r * 3 copies of 'a' + r: rank 0's string is empty.
  const int rank = g_world->rank();
  absl::StatusOr<std::vector<std::string>> all =
      g_world->AllGatherBytes(std::string(3 * rank, static_cast<char>('a' + rank)));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), static_cast<size_t>(g_world->size()));
  for (int r = 0; r < g_world->size(); ++r) {
    EXPECT_EQ((*all)[r], std::string(3 * r, static_cast<char>('a' + r)));
  }
}

TEST(CommunicatorMpi, SplitEvenOdd) {
  const int rank = g_world->rank();
  const int n = g_world->size();
  // Key -rank orders each group by descending world rank.
  absl::StatusOr<std::unique_ptr<Communicator>> sub = g_world->Split(rank % 2, -rank);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(*sub, nullptr);
  int group_size = 0;
  int ranks_above = 0;  // members of my group with a larger world rank come first
  for (int r = rank % 2; r < n; r += 2) {
    ++group_size;
    ranks_above += r > rank;
  }
  EXPECT_EQ((*sub)->size(), group_size);
  EXPECT_EQ((*sub)->rank(), ranks_above);
  Tensor t = Make({1}, DType::kInt64);
  t.data<int64_t>()[0] = rank;
  ASSERT_TRUE((*sub)->AllReduce(t, ReduceOp::kSum).ok());
  int64_t expected = 0;
  for (int r = rank % 2; r < n; r += 2) expected += r;
  EXPECT_EQ(t.data<int64_t>()[0], expected);
}

TEST(CommunicatorMpi, SplitWithNoColorGivesNull) {
  const int rank = g_world->rank();
  absl::StatusOr<std::unique_ptr<Communicator>> sub = g_world->Split(rank == 0 ? -1 : 0, rank);
  ASSERT_TRUE(sub.ok()) << sub.status();
  if (rank == 0) {
    EXPECT_EQ(*sub, nullptr);
  } else {
    ASSERT_NE(*sub, nullptr);
    EXPECT_EQ((*sub)->size(), g_world->size() - 1);
    EXPECT_EQ((*sub)->rank(), rank - 1);
  }
}

// CTest starts every rank on this machine, so the node's ranks are all of them, in order;
// the node communicator still moves data.
TEST(CommunicatorMpi, SplitSharedGivesTheRanksOfThisNode) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> node = g_world->SplitShared();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->rank(), g_world->rank());
  EXPECT_EQ((*node)->size(), g_world->size());
  Tensor t = Make({1}, DType::kInt32);
  t.data<int32_t>()[0] = 1;
  ASSERT_TRUE((*node)->AllReduce(t, ReduceOp::kSum).ok());
  EXPECT_EQ(t.data<int32_t>()[0], g_world->size());
}

TEST(CommunicatorMpi, Barrier) { EXPECT_TRUE(g_world->Barrier().ok()); }

// Every rank makes the same mistake, so every rank gets the error and none waits in MPI;
// the barrier afterwards shows that the ranks are still in step.
TEST(CommunicatorMpi, ArgumentErrorsComeBackWithoutCommunicating) {
  const int rank = g_world->rank();
  const int n = g_world->size();

  std::vector<int64_t> counts(n, 2);
  counts[rank] = 3;  // but the input has 2 elements
  Tensor input = Make({2}, DType::kFloat32);
  Tensor output = Make({2 * n}, DType::kFloat32);
  absl::Status status = g_world->AllGatherV(output, input, counts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("all_gather_v (mpi, rank ", rank, " of ", n,
                                                       "): counts[", rank, "] = 3")));

  Tensor wrong_output = Make({2 * n + 1}, DType::kFloat32);
  status = g_world->AllGather(wrong_output, input);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(n, " * 2 = ", 2 * n, " elements")));

  Tensor wide = Make({4, 4}, DType::kFloat32);
  Tensor strided = *wide.Slice(1, 0, 4, 2);
  status = g_world->AllReduce(strided, ReduceOp::kSum);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("is not contiguous"));

  // A CUDA tensor (host bytes labelled cuda:0: validation rejects it before any access).
  std::vector<float> host(4);
  Tensor cuda = *Tensor::FromStorage(
      Storage::Borrow(host.data(), sizeof(float) * 4, Device::CUDA(0)), DType::kFloat32, {4});
  std::vector<Tensor> tensors = {Make({4}, DType::kFloat32), cuda};
  status = g_world->Broadcast(absl::MakeSpan(tensors), 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensors[1]"));
  EXPECT_THAT(status.message(), HasSubstr("the mpi backend needs cpu tensors"));

  Tensor f8 = Make({4}, DType::kFloat8E4M3FN);
  status = g_world->AllReduce(f8, ReduceOp::kMax);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max is not supported for float8_e4m3fn"));

  std::string bytes;
  status = g_world->BroadcastBytes(&bytes, n);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("root ", n, " is not in [0, ", n, ")")));

  EXPECT_TRUE(g_world->Barrier().ok());
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
