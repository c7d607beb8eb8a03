// The device copies of LoadStateDict's reads (core/distributed/internal/load/
// device_copies.h), on the CPU: a file of random bytes is planned (PlanReads), its reads
// staged into one buffer as the staged reader places them (each at a byte congruent to its
// file offset modulo 16, after the last), the copies planned over the buffer's reads and
// run by a backend that copies with memcpy; every element of every dest is then compared
// with the file's bytes at that element's place, and the copies' shapes with the layout.
#include "sdrt/core/distributed/internal/load/device_copies.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/tensor/backend/pitched_copy.h"

namespace sdrt::internal {
namespace {

constexpr int64_t kAlign = 16;  // the staged reader's placement of a read in its buffer
constexpr uint8_t kUnwritten = 0xAB;

// Memcpy and Memcpy2D as host copies, counted; nothing else is used.
class HostBackend final : public DeviceBackend {
 public:
  int memcpys = 0;
  int memcpy2ds = 0;
  absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t, Device) override {
    return absl::UnimplementedError("Allocate");
  }
  absl::Status Memcpy(void* dst, Device, const void* src, Device, int64_t nbytes, StreamHandle,
                      bool) override {
    ++memcpys;
    std::memcpy(dst, src, static_cast<size_t>(nbytes));
    return absl::OkStatus();
  }
  absl::Status Memcpy2D(void* dst, int64_t dst_pitch, Device, const void* src, int64_t src_pitch,
                        Device, int64_t width, int64_t height, StreamHandle, bool) override {
    ++memcpy2ds;
    for (int64_t r = 0; r < height; ++r) {
      std::memcpy(static_cast<uint8_t*>(dst) + r * dst_pitch,
                  static_cast<const uint8_t*>(src) + r * src_pitch, static_cast<size_t>(width));
    }
    return absl::OkStatus();
  }
  absl::Status Memset(void*, uint8_t, int64_t, Device, StreamHandle, bool) override {
    return absl::UnimplementedError("Memset");
  }
  absl::Status StridedCopy(void*, const void*, int64_t, absl::Span<const int64_t>,
                           absl::Span<const int64_t>, absl::Span<const int64_t>, Device,
                           StreamHandle, bool) override {
    return absl::UnimplementedError("StridedCopy");
  }
  absl::Status ConvertFloats(void*, DType, const void*, DType, int64_t, Device, StreamHandle,
                             bool) override {
    return absl::UnimplementedError("ConvertFloats");
  }
  absl::Status Fp8Box(const Fp8BoxOp&, Device, StreamHandle, bool) override {
    return absl::UnimplementedError("Fp8Box");
  }
};

// One tensor of the file (`dtype`, `shape` at byte `offset`) and the dest that holds the
// global runs `runs` of it (one run per dim).
struct Piece {
  DType dtype;
  IntVector shape;
  int64_t offset;
  ShardRuns runs;
  Tensor dest;
};

ShardRuns Whole(const IntVector& shape) {
  ShardRuns runs;
  for (const int64_t n : shape) runs.push_back({IndexRun{0, 0, n}});
  return runs;
}

// `shape` of `dtype` at element `offset` of a new CPU storage of `elements`, with
// `strides` (empty: contiguous), every byte kUnwritten.
Tensor Dest(DType dtype, IntVector shape, IntVector strides = {}, int64_t elements = 0,
            int64_t offset = 0) {
  const Tensor contiguous = *Tensor::Empty(shape, dtype);
  if (strides.empty()) {
    strides = IntVector(contiguous.strides().begin(), contiguous.strides().end());
  }
  if (elements == 0) elements = contiguous.numel();
  const int64_t bytes = *BytesForElements(dtype, elements);
  std::shared_ptr<Storage> storage = *Storage::AllocateCpu(bytes);
  std::memset(storage->data(), kUnwritten, static_cast<size_t>(bytes));
  return *Tensor::FromStorage(storage, dtype, shape, strides, offset);
}

struct Staged {
  ReadPlan plan;
  std::vector<int64_t> bases;  // of each read in the buffer
  std::vector<DeviceCopy> copies;
  std::vector<size_t> others;
};

// Plans the reads of `pieces` from `file`, stages them in one buffer, plans their copies
// into the dests on the CPU and runs them with `backend`.
Staged Load(const std::vector<uint8_t>& file, std::vector<Piece>& pieces, HostBackend& backend) {
  std::deque<CheckpointSourceTensor> entries;
  std::deque<LocalTarget> targets;
  std::vector<ReadDest> dests;
  std::vector<ReadTensor> reads;
  for (Piece& p : pieces) {
    entries.push_back(CheckpointSourceTensor{"t", p.dtype, p.shape, 0, p.offset, 0});
    LocalTarget& target = targets.emplace_back();
    target.dests.push_back(p.dest);
    target.runs.push_back(&p.runs);
    dests.push_back(ReadDest{&target, &entries.back(), 0, &p.runs});
    reads.push_back(ReadTensor{0, p.offset, ElementBits(p.dtype), entries.back().shape, &p.runs});
  }
  Staged out;
  out.plan = *PlanReads(reads, ReadPlanOptions{});
  std::vector<uint8_t> buffer(static_cast<size_t>(out.plan.read_bytes) +
                              out.plan.reads.size() * kAlign + kAlign);
  int64_t used = 0;
  for (const Read& r : out.plan.reads) {
    int64_t at = used + (r.offset - used) % kAlign;
    if (at < used) at += kAlign;
    out.bases.push_back(at);
    std::memcpy(buffer.data() + at, file.data() + r.offset, static_cast<size_t>(r.bytes));
    PlanDeviceCopies(out.plan, dests, r, buffer.data() + at, Device::CPU(), out.copies,
                     out.others);
    used = at + r.bytes;
  }
  EXPECT_TRUE(EnqueueDeviceCopies(out.copies, Device::CPU(), backend, nullptr).ok());
  return out;
}

// Whether every element of `p.dest` holds the file's bytes of its global index.
void ExpectFilled(const std::vector<uint8_t>& file, const Piece& p) {
  const int64_t size = ElementBits(p.dtype) / 8;
  const size_t rank = p.shape.size();
  IntVector local(rank, 0);
  for (int64_t e = 0; e < p.dest.numel(); ++e) {
    int64_t global = 0;
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d) {
      global = global * p.shape[d] + local[d] - p.runs[d][0].local + p.runs[d][0].global;
      at += local[d] * p.dest.strides()[d];
    }
    ASSERT_EQ(std::memcmp(static_cast<const uint8_t*>(p.dest.data_ptr()) + at * size,
                          file.data() + p.offset + global * size, static_cast<size_t>(size)),
              0)
        << "element " << e;
    for (size_t d = rank; d-- > 0;) {
      if (++local[d] < p.dest.shape()[d]) break;
      local[d] = 0;
    }
  }
}

bool Unwritten(const Tensor& t) {
  const uint8_t* p = static_cast<const uint8_t*>(t.storage()->data());
  for (int64_t i = 0; i < t.storage()->nbytes(); ++i) {
    if (p[i] != kUnwritten) return false;
  }
  return true;
}

std::vector<uint8_t> RandomFile(int64_t bytes) {
  std::mt19937 rng(7);
  std::vector<uint8_t> file(static_cast<size_t>(bytes));
  for (uint8_t& b : file) b = static_cast<uint8_t>(rng());
  return file;
}

TEST(DeviceCopiesTest, WholeTensorsBackToBackAreOneCopyPerRunOfAdjacentDests) {
  const std::vector<uint8_t> file = RandomFile(512);
  // A (128 bytes) and B (20) are adjacent in one arena, C (12) is apart; all three follow
  // one another in the file: one read, two copies.
  const Tensor arena = Dest(DType::kUInt8, {256});
  std::vector<Piece> pieces = {
      {DType::kFloat32, {4, 8}, 64, Whole({4, 8}),
       *Tensor::FromStorage(arena.storage(), DType::kFloat32, {4, 8}, {8, 1}, 0)},
      {DType::kBFloat16, {10}, 192, Whole({10}),
       *Tensor::FromStorage(arena.storage(), DType::kBFloat16, {10}, {1}, 64)},
      {DType::kFloat32, {3}, 212, Whole({3}), Dest(DType::kFloat32, {3})},
  };
  HostBackend backend;
  const Staged staged = Load(file, pieces, backend);
  ASSERT_EQ(staged.plan.reads.size(), 1u);
  ASSERT_EQ(staged.copies.size(), 2u);
  EXPECT_EQ(staged.copies[0].height, 1);
  EXPECT_EQ(staged.copies[0].width, pieces[0].dest.nbytes() + pieces[1].dest.nbytes());
  EXPECT_EQ(staged.copies[1].width, pieces[2].dest.nbytes());
  EXPECT_TRUE(staged.others.empty());
  EXPECT_EQ(backend.memcpys, 2);
  EXPECT_EQ(backend.memcpy2ds, 0);
  for (const Piece& p : pieces) ExpectFilled(file, p);
}

// The rows of a Shard(1) piece of [rows, cols] on rank `rank` of 2 (each row its own read).
Piece Shard1(DType dtype, int64_t rows, int64_t cols, int rank, int64_t offset, Tensor dest) {
  const int64_t half = cols / 2;
  return {dtype, {rows, cols}, offset, ShardRuns{{IndexRun{0, 0, rows}},
                                                 {IndexRun{rank * half, 0, half}}},
          std::move(dest)};
}

TEST(DeviceCopiesTest, RowsOfAShard1PieceAreOneCopy) {
  const std::vector<uint8_t> file = RandomFile(4096);
  struct Layout {
    DType dtype;
    int64_t cols;
    int64_t dest_row_elements;  // the dest's row stride; cols / 2: contiguous
    bool one_row;               // the rows follow one another in the buffer and the dest
  };
  // Rows that the buffer packs (f32, 80 of 160 bytes) into a contiguous dest: one 1-D copy.
  // Rows it does not pack (bf16, 20 of 40 bytes: each placed at its file offset modulo 16)
  // or a dest whose rows are apart (a view of a wider buffer): one 2-D copy.
  for (const Layout& l : {Layout{DType::kFloat32, 40, 20, true},
                          Layout{DType::kBFloat16, 20, 10, false},
                          Layout{DType::kFloat32, 40, 32, false}}) {
    const int64_t rows = 6;
    const int64_t half = l.cols / 2;
    const int64_t size = ElementBits(l.dtype) / 8;
    std::vector<Piece> pieces = {Shard1(l.dtype, rows, l.cols, 1, 32,
                                        Dest(l.dtype, {rows, half}, {l.dest_row_elements, 1},
                                             rows * l.dest_row_elements))};
    HostBackend backend;
    const Staged staged = Load(file, pieces, backend);
    ASSERT_EQ(staged.plan.reads.size(), static_cast<size_t>(rows));
    ASSERT_EQ(staged.copies.size(), 1u);
    const DeviceCopy& c = staged.copies[0];
    const int64_t src_pitch = staged.bases[1] - staged.bases[0];
    const int64_t dst_pitch = l.dest_row_elements * size;
    ASSERT_EQ(src_pitch == half * size && dst_pitch == half * size, l.one_row);
    if (l.one_row) {
      EXPECT_EQ(c.height, 1);
      EXPECT_EQ(c.width, rows * half * size);
      EXPECT_EQ(backend.memcpys, 1);
    } else {
      EXPECT_EQ(c.height, rows);
      EXPECT_EQ(c.width, half * size);
      EXPECT_EQ(c.src_pitch, src_pitch);
      EXPECT_EQ(c.dst_pitch, dst_pitch);
      EXPECT_EQ(backend.memcpy2ds, 1);
    }
    EXPECT_TRUE(staged.others.empty());
    ExpectFilled(file, pieces[0]);
  }
}

TEST(DeviceCopiesTest, UnalignedTensorsAreByteCopies) {
  const std::vector<uint8_t> file = RandomFile(1024);
  // bf16 at odd file offsets: a whole tensor, then the rows of a Shard(1) piece. The staged
  // bytes sit at odd addresses; the copies take them from there.
  std::vector<Piece> pieces = {
      {DType::kBFloat16, {5, 6}, 101, Whole({5, 6}), Dest(DType::kBFloat16, {5, 6})},
      Shard1(DType::kBFloat16, 4, 10, 0, 161, Dest(DType::kBFloat16, {4, 5})),
  };
  HostBackend backend;
  const Staged staged = Load(file, pieces, backend);
  EXPECT_TRUE(staged.others.empty());
  ASSERT_EQ(staged.copies.size(), pieces.size());  // one per piece: its rows are one copy
  for (const DeviceCopy& c : staged.copies) {
    EXPECT_NE(reinterpret_cast<uintptr_t>(c.src) % ElementAlignment(DType::kBFloat16), 0u);
  }
  EXPECT_EQ(staged.copies[1].height, 4);
  for (const Piece& p : pieces) ExpectFilled(file, p);
}

TEST(DeviceCopiesTest, CastsAndNonContiguousDestsAreLeftToTheCaller) {
  const std::vector<uint8_t> file = RandomFile(1024);
  std::vector<Piece> pieces = {
      // a cast: bf16 in the file, f32 in the dest
      {DType::kBFloat16, {4, 8}, 0, Whole({4, 8}), Dest(DType::kFloat32, {4, 8})},
      // a transposed dest
      {DType::kFloat32, {4, 8}, 64, Whole({4, 8}), Dest(DType::kFloat32, {4, 8}, {1, 4})},
      // two runs on dim 0 (rows 0-1 and 3-4 of 5)
      {DType::kFloat32, {5, 8}, 256, ShardRuns{{IndexRun{0, 0, 2}, IndexRun{3, 2, 2}},
                                                {IndexRun{0, 0, 8}}},
       Dest(DType::kFloat32, {4, 8})},
      // and one the planner takes
      {DType::kFloat32, {3}, 448, Whole({3}), Dest(DType::kFloat32, {3})},
  };
  HostBackend backend;
  const Staged staged = Load(file, pieces, backend);
  ASSERT_EQ(staged.copies.size(), 1u);
  EXPECT_EQ(staged.others.size(), staged.plan.segments.size() - 1);
  for (const size_t i : staged.others) EXPECT_NE(staged.plan.segments[i].tensor, 3u);
  for (size_t t = 0; t < 3; ++t) EXPECT_TRUE(Unwritten(pieces[t].dest)) << t;
  ExpectFilled(file, pieces[3]);
}

TEST(DeviceCopiesTest, RowsAreJoinedUpToThePitchLimit) {
  // Planned only (nothing is copied): each row's read placed `pitch` bytes after the last
  // in address space alone.
  for (const int64_t pitch : {kMaxPitchBytes, kMaxPitchBytes + 1}) {
    std::vector<Piece> pieces = {Shard1(DType::kFloat32, 3, 40, 1, 32,
                                        Dest(DType::kFloat32, {3, 20}))};
    CheckpointSourceTensor entry{"t", DType::kFloat32, pieces[0].shape, 0, 32, 0};
    LocalTarget target;
    target.dests.push_back(pieces[0].dest);
    const std::vector<ReadDest> dests = {ReadDest{&target, &entry, 0, &pieces[0].runs}};
    const ReadPlan plan = *PlanReads(
        {ReadTensor{0, 32, 32, entry.shape, &pieces[0].runs}}, ReadPlanOptions{});
    ASSERT_EQ(plan.reads.size(), 3u);
    std::vector<DeviceCopy> copies;
    std::vector<size_t> others;
    const uintptr_t first = uintptr_t{1} << 40;
    for (size_t k = 0; k < plan.reads.size(); ++k) {
      const uintptr_t at = first + k * static_cast<uintptr_t>(pitch);
      PlanDeviceCopies(plan, dests, plan.reads[k], reinterpret_cast<const uint8_t*>(at),
                       Device::CPU(), copies, others);
    }
    EXPECT_TRUE(others.empty());
    if (pitch <= kMaxPitchBytes) {
      ASSERT_EQ(copies.size(), 1u);
      EXPECT_EQ(copies[0].height, 3);
      EXPECT_EQ(copies[0].src_pitch, pitch);
    } else {
      EXPECT_EQ(copies.size(), 3u);
    }
  }
}

}  // namespace
}  // namespace sdrt::internal
