// NCCL with several ranks (label gpu): N ranks in one process, one thread per GPU
// (tests/support/nccl_ranks.h), whenever two or more GPUs are visible; skipped with a
// message otherwise. Unlike the one-rank tests, every collective here moves data between
// ranks, so rank offsets, the uneven all-gather-v (grouped broadcasts), the grouped
// broadcast, the dtype and reduce-op mappings and avg's division are checked against
// values computed on the host. Also the non-blocking creation and the watchdog: a rank
// that never joins makes Create, and a collective, return DeadlineExceeded instead of
// hanging (Create's case needs one GPU only).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tests/support/nccl_ranks.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using test::HashBytes;
using test::RunNcclRanks;
using ::testing::HasSubstr;

std::string Bytes(const Tensor& t) {
  const Tensor cpu = *t.To(Device::CPU());
  return std::string(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
}

// Rank q's contribution in the gathers: `count` elements of `dtype`, bytes hashed from q.
Tensor Piece(int64_t count, DType dtype, int q) { return HashBytes({count}, dtype, 11, q); }

// The pieces of every rank, concatenated in rank order, on the host.
std::string Concatenated(absl::Span<const int64_t> counts, DType dtype) {
  std::string all;
  for (int q = 0; q < static_cast<int>(counts.size()); ++q)
    all += Bytes(Piece(counts[q], dtype, q));
  return all;
}

TEST(NcclMultiGpu, AllGatherEvenOnDeviceAndStagedFromTheCpu) {
  SDRT_RANKS_OR_SKIP(ranks);
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Device gpu = Device::CUDA(rank);
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
      constexpr int64_t kCount = 37;  // odd byte counts for the 1- and 2-byte dtypes
      const std::vector<int64_t> counts(ranks, kCount);
      const std::string expected = Concatenated(counts, dtype);
      Tensor out = *Tensor::Zeros({ranks * kCount}, dtype, gpu);
      ASSERT_TRUE(comm.AllGather(out, *Piece(kCount, dtype, rank).To(gpu)).ok());
      EXPECT_EQ(Bytes(out), expected) << "rank " << rank << " " << DTypeName(dtype);
      // In place: the input is this rank's slice of the output.
      Tensor in_place = *Tensor::Zeros({ranks * kCount}, dtype, gpu);
      Tensor slice = *in_place.Narrow(0, rank * kCount, kCount);
      ASSERT_TRUE(slice.CopyFrom(Piece(kCount, dtype, rank)).ok());
      ASSERT_TRUE(comm.AllGather(in_place, slice).ok());
      EXPECT_EQ(Bytes(in_place), expected) << "rank " << rank << " in place";
      // CPU tensors, staged through the GPU (case-013).
      Tensor host_out = *Tensor::Zeros({ranks * kCount}, dtype);
      ASSERT_TRUE(comm.AllGather(host_out, Piece(kCount, dtype, rank)).ok());
      EXPECT_TRUE(host_out.device().is_cpu());
      EXPECT_EQ(Bytes(host_out), expected) << "rank " << rank << " staged";
    }
  });
}

// Uneven counts (rank 1 sends nothing): ranks' grouped broadcasts into their slots.
TEST(NcclMultiGpu, AllGatherVUnevenWithAnEmptyRank) {
  SDRT_RANKS_OR_SKIP(ranks);
  std::vector<int64_t> counts(ranks);
  for (int q = 0; q < ranks; ++q) counts[q] = q == 1 ? 0 : 2 * q + 3;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Device gpu = Device::CUDA(rank);
    for (DType dtype : {DType::kFloat64, DType::kFloat16, DType::kUInt8}) {
      const std::string expected = Concatenated(counts, dtype);
      Tensor out = *Tensor::Zeros({total}, dtype, gpu);
      ASSERT_TRUE(comm.AllGatherV(out, *Piece(counts[rank], dtype, rank).To(gpu), counts).ok());
      EXPECT_EQ(Bytes(out), expected) << "rank " << rank << " " << DTypeName(dtype);
      Tensor host_out = *Tensor::Zeros({total}, dtype);
      ASSERT_TRUE(comm.AllGatherV(host_out, Piece(counts[rank], dtype, rank), counts).ok());
      EXPECT_EQ(Bytes(host_out), expected) << "rank " << rank << " staged";
    }
  });
}

// Several tensors (CUDA and CPU, several dtypes) as one group, from the last rank and
// from rank 0; the root's CPU tensor is left as it was.
TEST(NcclMultiGpu, GroupedBroadcastFromEitherEnd) {
  SDRT_RANKS_OR_SKIP(ranks);
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Device gpu = Device::CUDA(rank);
    for (int root : {ranks - 1, 0}) {
      const std::vector<Tensor> sent = {HashBytes({33}, DType::kFloat32, 5, root),
                                        HashBytes({7, 3}, DType::kBFloat16, 6, root),
                                        HashBytes({1001}, DType::kInt64, 7, root)};
      std::vector<Tensor> tensors;
      for (size_t i = 0; i < sent.size(); ++i) {
        const Tensor mine =
            rank == root ? sent[i] : *Tensor::Zeros(sent[i].shape(), sent[i].dtype());
        tensors.push_back(i == 1 ? *mine.Clone() : *mine.To(gpu));  // [1] stays on the CPU
      }
      ASSERT_TRUE(comm.Broadcast(absl::MakeSpan(tensors), root).ok());
      for (size_t i = 0; i < sent.size(); ++i) {
        EXPECT_EQ(Bytes(tensors[i]), Bytes(sent[i]))
            << "rank " << rank << " root " << root << " tensor " << i;
      }
    }
  });
}

// --- all-reduce against the host --------------------------------------------------------
// Values are small integers (and products of at most one 2), exact in every dtype and in
// any combining order, so the host's result is the only right one for any rank count.

double SumValue(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 9) - 4; }
double ProductValue(int rank, int64_t i) {
  if (rank == 0) return i % 2 == 0 ? 2 : 1;
  return (rank + i) % 3 == 0 ? -1 : 1;
}

// `v` stored as element i of the CPU tensor `t` in its dtype.
void Set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kBool:
      t.data<uint8_t>()[i] = v != 0;
      return;
    case DType::kUInt8:
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
      return;
    case DType::kInt8:
      t.data<int8_t>()[i] = static_cast<int8_t>(v);
      return;
    case DType::kInt32:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      return;
    case DType::kInt64:
      t.data<int64_t>()[i] = static_cast<int64_t>(v);
      return;
    case DType::kFloat16:
      t.data<uint16_t>()[i] = internal::FloatToFloat16(static_cast<float>(v));
      return;
    case DType::kBFloat16:
      t.data<uint16_t>()[i] = internal::FloatToBFloat16(static_cast<float>(v));
      return;
    case DType::kFloat32:
      t.data<float>()[i] = static_cast<float>(v);
      return;
    case DType::kFloat64:
      t.data<double>()[i] = v;
      return;
    default:
      FAIL() << "no all-reduce test values for " << DTypeName(t.dtype());
  }
}

// Element i of the CPU tensor `t` as a double (exact for the test values).
double Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBool:
    case DType::kUInt8:
      return t.data<uint8_t>()[i];
    case DType::kInt8:
      return t.data<int8_t>()[i];
    case DType::kInt32:
      return t.data<int32_t>()[i];
    case DType::kInt64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kFloat16:
      return internal::Float16ToFloat(t.data<uint16_t>()[i]);
    case DType::kBFloat16:
      return internal::BFloat16ToFloat(t.data<uint16_t>()[i]);
    case DType::kFloat32:
      return t.data<float>()[i];
    default:
      return t.data<double>()[i];
  }
}

// Rank `rank`'s input of `op`.
Tensor Input(DType dtype, ReduceOp op, int rank, int64_t n) {
  Tensor t = *Tensor::Empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    double v = op == ReduceOp::kProduct ? ProductValue(rank, i) : SumValue(rank, i);
    if (dtype == DType::kBool) v = (rank + i) % 3 == 0;
    if (dtype == DType::kUInt8) v = std::abs(v);
    Set(t, i, v);
  }
  return t;
}

// The reduction over `ranks` ranks as the MPI backend defines it (comm/communicator.h):
// avg is the sum divided in the dtype (integers truncate; 16-bit floats in float32).
Tensor Expected(DType dtype, ReduceOp op, int ranks, int64_t n) {
  Tensor t = *Tensor::Empty({n}, dtype);
  std::vector<Tensor> inputs;
  for (int q = 0; q < ranks; ++q) inputs.push_back(Input(dtype, op, q, n));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> v;
    for (const Tensor& in : inputs) v.push_back(Get(in, i));
    double r = v[0];
    for (size_t q = 1; q < v.size(); ++q) {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          r = dtype == DType::kBool ? std::max(r, v[q]) : r + v[q];
          break;
        case ReduceOp::kProduct:
          r = dtype == DType::kBool ? std::min(r, v[q]) : r * v[q];
          break;
        case ReduceOp::kMin:
          r = std::min(r, v[q]);
          break;
        case ReduceOp::kMax:
          r = std::max(r, v[q]);
          break;
      }
    }
    if (op == ReduceOp::kAvg) {
      switch (dtype) {
        case DType::kFloat16:
          t.data<uint16_t>()[i] = internal::FloatToFloat16(static_cast<float>(r) / ranks);
          continue;
        case DType::kBFloat16:
          t.data<uint16_t>()[i] = internal::FloatToBFloat16(static_cast<float>(r) / ranks);
          continue;
        case DType::kFloat32:
          r = static_cast<float>(r) / ranks;
          break;
        case DType::kFloat64:
          r = r / ranks;
          break;
        default:  // integers: C++ division truncates toward zero
          r = static_cast<double>(static_cast<int64_t>(r) / ranks);
      }
    }
    Set(t, i, r);
  }
  return t;
}

TEST(NcclMultiGpu, AllReduceEveryDTypeAndOpMatchesTheHost) {
  SDRT_RANKS_OR_SKIP(ranks);
  constexpr int64_t kN = 1000;
  const DType dtypes[] = {DType::kBool,     DType::kUInt8,   DType::kInt8,
                          DType::kInt32,    DType::kInt64,   DType::kFloat16,
                          DType::kBFloat16, DType::kFloat32, DType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Device gpu = Device::CUDA(rank);
    for (DType dtype : dtypes) {
      for (ReduceOp op : ops) {
        if (dtype == DType::kBool && op == ReduceOp::kAvg) continue;  // InvalidArgument
        const std::string what =
            absl::StrCat("rank ", rank, " ", DTypeName(dtype), " ", ReduceOpName(op));
        const std::string expected = Bytes(Expected(dtype, op, ranks, kN));
        Tensor t = *Input(dtype, op, rank, kN).To(gpu);
        const absl::Status s = comm.AllReduce(t, op);
        ASSERT_TRUE(s.ok()) << what << ": " << s;
        EXPECT_EQ(Bytes(t), expected) << what;
      }
    }
    // A CPU tensor is staged and comes back on the CPU.
    Tensor host = Input(DType::kFloat32, ReduceOp::kAvg, rank, kN);
    ASSERT_TRUE(comm.AllReduce(host, ReduceOp::kAvg).ok());
    EXPECT_TRUE(host.device().is_cpu());
    EXPECT_EQ(Bytes(host), Bytes(Expected(DType::kFloat32, ReduceOp::kAvg, ranks, kN)));
  });
}

TEST(NcclMultiGpu, BytesSplitAndBarrier) {
  SDRT_RANKS_OR_SKIP(ranks);
  RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    // Lengths differ per rank, rank 0's is empty.
    const auto text = [](int q) { return std::string(static_cast<size_t>(q) * 1000, 'a' + q); };
    absl::StatusOr<std::vector<std::string>> all = comm.AllGatherBytes(text(rank));
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->size(), static_cast<size_t>(ranks));
    for (int q = 0; q < ranks; ++q)
      EXPECT_EQ((*all)[q], text(q)) << "rank " << rank << " from " << q;
    std::string bytes = rank == ranks - 1 ? std::string(100000, 'z') : "old";
    ASSERT_TRUE(comm.BroadcastBytes(&bytes, ranks - 1).ok());
    EXPECT_EQ(bytes, std::string(100000, 'z')) << "rank " << rank;

    // Even and odd ranks (rank 1 without a color), each group reduced alone.
    const int color = rank == 1 ? -1 : rank % 2;
    absl::StatusOr<std::unique_ptr<Communicator>> sub = comm.Split(color, rank);
    ASSERT_TRUE(sub.ok()) << sub.status();
    if (rank == 1) {
      EXPECT_EQ(*sub, nullptr);
    } else {
      ASSERT_NE(*sub, nullptr);
      Tensor t = *Tensor::Zeros({1}, DType::kInt64);
      t.data<int64_t>()[0] = rank;
      ASSERT_TRUE((*sub)->AllReduce(t, ReduceOp::kSum).ok());
      int64_t expected = 0;
      for (int q = rank % 2; q < ranks; q += 2) expected += q == 1 ? 0 : q;
      EXPECT_EQ(t.data<int64_t>()[0], expected) << "rank " << rank;
    }
    EXPECT_TRUE(comm.Barrier().ok()) << "rank " << rank;
  });
}

// --- the watchdog ------------------------------------------------------------------------

// Rank 0 of 2 alone: the non-blocking init waits for rank 1 under the deadline, then is
// aborted. One GPU suffices (rank 1 never claims one).
TEST(NcclWatchdog, CreateWithoutThePeerIsDeadlineExceeded) {
  SDRT_SKIP_WITHOUT_GPU();
  absl::StatusOr<NcclUniqueId> id = NcclUniqueId::Generate();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclCommunicator::Options options;
  options.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(0, 2, 0, *id, options);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("NcclCommunicator::Create (rank 0 of 2)"));
  EXPECT_THAT(comm.status().message(), HasSubstr("not complete after 2000 ms"));
  EXPECT_THAT(comm.status().message(), HasSubstr("aborted"));
  EXPECT_GE(elapsed, std::chrono::seconds(2));
  EXPECT_LT(elapsed, std::chrono::seconds(32)) << "the abort itself must not hang";
}

// Two ranks; rank 1 skips a collective: rank 0's returns DeadlineExceeded (its first
// collective, so NCCL's lazy connection setup is what waits) and the communicator is
// then unusable. Rank 1 waits for rank 0's verdict before destroying its own.
TEST(NcclWatchdog, ACollectiveWithoutThePeerIsDeadlineExceeded) {
  SDRT_RANKS_OR_SKIP(ranks);
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  NcclCommunicator::Options options;
  options.timeout = std::chrono::seconds(10);
  RunNcclRanks(
      2,
      [&](int rank, NcclCommunicator& comm) {
        if (rank == 1) {
          done.wait();
          return;
        }
        Tensor t = *Tensor::Zeros({1024}, DType::kFloat32, Device::CUDA(0));
        const auto start = std::chrono::steady_clock::now();
        const absl::Status s = comm.AllReduce(t, ReduceOp::kSum);
        const auto elapsed = std::chrono::steady_clock::now() - start;
        rank0_done.set_value();
        EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
        EXPECT_THAT(s.message(), HasSubstr("all_reduce (nccl, rank 0 of 2)"));
        EXPECT_THAT(s.message(), HasSubstr("is a rank missing from the collective?"));
        EXPECT_LT(elapsed, std::chrono::seconds(40));
        const absl::Status after = comm.Barrier();
        EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
        EXPECT_THAT(after.message(), HasSubstr("aborted"));
      },
      options);
  (void)ranks;
}

}  // namespace
}  // namespace sdrt
