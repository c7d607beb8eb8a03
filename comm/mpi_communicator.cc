#include "sdrt/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/internal/mpi_check.h"
#include "sdrt/comm/internal/mpi_roll_call.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// The largest count an uneven all-gather sends with MPI_Iallgatherv (see GatherV).
constexpr int64_t kMaxAllgathervCount = int64_t{32} << 10;
// The largest message of an all-reduce (see DoAllReduce).
constexpr int64_t kAllReducePieceBytes = int64_t{16} << 20;

using internal::ToComm;
using internal::ToHandle;

void FinalizeMpi() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

// The MPI datatype a dtype is reduced as, from the dtype table's reduce column and width:
// bool and the integers as the MPI integer of their width, float32 and float64 as
// MPI_FLOAT and MPI_DOUBLE, the 16-bit floats as their bit patterns (MPI_UINT16_T),
// combined by the user-defined ops below. Communicator::AllReduce refuses the dtypes
// without a reduce kind before this is asked.
MPI_Datatype ReduceDatatype(DType dtype) {
  const int bits = ElementBits(dtype);
  switch (ReduceKindOf(dtype)) {
    case ReduceKind::kBool:  // 0 or 1, reduced with MPI_MAX / MPI_MIN
    case ReduceKind::kUnsigned:
      return bits == 8    ? MPI_UINT8_T
             : bits == 16 ? MPI_UINT16_T
             : bits == 32 ? MPI_UINT32_T
                          : MPI_UINT64_T;
    case ReduceKind::kSigned:
      return bits == 8    ? MPI_INT8_T
             : bits == 16 ? MPI_INT16_T
             : bits == 32 ? MPI_INT32_T
                          : MPI_INT64_T;
    case ReduceKind::kFloat:
      return bits == 16 ? MPI_UINT16_T : bits == 32 ? MPI_FLOAT : MPI_DOUBLE;
    case ReduceKind::kBFloat:
      return MPI_UINT16_T;
    case ReduceKind::kNone:
      break;
  }
  return MPI_DATATYPE_NULL;
}

// A built-in op; bool maps sum to max (or) and product to min (and) like ProcessGroupNCCL.
// kAvg reduces with MPI_SUM and divides afterwards.
MPI_Op BuiltinOp(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return ReduceKindOf(dtype) == ReduceKind::kBool ? MPI_MAX : MPI_SUM;
    case ReduceOp::kProduct:
      return ReduceKindOf(dtype) == ReduceKind::kBool ? MPI_MIN : MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_OP_NULL;
}

// --- 16-bit float reductions: widen to float32, combine, round back ---------------------
struct Half {
  static float ToFloat(uint16_t h) { return internal::Float16ToFloat(h); }
  static uint16_t FromFloat(float f) { return internal::FloatToFloat16(f); }
};
struct BHalf {
  static float ToFloat(uint16_t h) { return internal::BFloat16ToFloat(h); }
  static uint16_t FromFloat(float f) { return internal::FloatToBFloat16(f); }
};
// Min and max propagate NaN, as torch.minimum / torch.maximum do.
struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Multiply {
  float operator()(float a, float b) const { return a * b; }
};
struct Minimum {
  float operator()(float a, float b) const { return (std::isnan(a) || a < b) ? a : b; }
};
struct Maximum {
  float operator()(float a, float b) const { return (std::isnan(a) || a > b) ? a : b; }
};

// An MPI_User_function: inout[i] = combine(in[i], inout[i]).
template <typename Format, typename Combine>
void Combine16(void* in, void* inout, int* len, MPI_Datatype* /*datatype*/) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = Format::FromFloat(Combine()(Format::ToFloat(a[i]), Format::ToFloat(b[i])));
  }
}

template <typename Format>
MPI_User_function* Combine16For(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &Combine16<Format, Add>;
    case ReduceOp::kProduct:
      return &Combine16<Format, Multiply>;
    case ReduceOp::kMin:
      return &Combine16<Format, Minimum>;
    case ReduceOp::kMax:
      return &Combine16<Format, Maximum>;
  }
  return nullptr;
}

// A user-defined MPI_Op freed when it goes out of scope.
struct ScopedOp {
  MPI_Op op = MPI_OP_NULL;
  ~ScopedOp() {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
};

// kAvg's second step: every element divided by `n` in its own type (integers truncate).
template <typename T>
void DivideAll(Tensor& tensor, int n) {
  T* data = tensor.data<T>();
  for (int64_t i = 0; i < tensor.numel(); ++i) data[i] = static_cast<T>(data[i] / n);
}

template <typename Format>
void Divide16(Tensor& tensor, int n) {
  uint16_t* data = tensor.data<uint16_t>();
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    data[i] = Format::FromFloat(Format::ToFloat(data[i]) / static_cast<float>(n));
  }
}

// The division in the arithmetic of the dtype's reduce kind and width (bool is never
// averaged: Communicator::AllReduce refuses it).
void DivideBy(Tensor& tensor, int n) {
  const int bits = ElementBits(tensor.dtype());
  switch (ReduceKindOf(tensor.dtype())) {
    case ReduceKind::kSigned:
      if (bits == 8) return DivideAll<int8_t>(tensor, n);
      if (bits == 16) return DivideAll<int16_t>(tensor, n);
      if (bits == 32) return DivideAll<int32_t>(tensor, n);
      return DivideAll<int64_t>(tensor, n);
    case ReduceKind::kUnsigned:
      if (bits == 8) return DivideAll<uint8_t>(tensor, n);
      if (bits == 16) return DivideAll<uint16_t>(tensor, n);
      if (bits == 32) return DivideAll<uint32_t>(tensor, n);
      return DivideAll<uint64_t>(tensor, n);
    case ReduceKind::kFloat:
      if (bits == 16) return Divide16<Half>(tensor, n);
      if (bits == 32) return DivideAll<float>(tensor, n);
      return DivideAll<double>(tensor, n);
    case ReduceKind::kBFloat:
      return Divide16<BHalf>(tensor, n);
    case ReduceKind::kBool:
    case ReduceKind::kNone:
      return;
  }
}

// Waits for `count` requests until they complete or `deadline` passes, without a roll call
// (while a communicator is being made there is none yet). DeadlineExceeded names `what`.
absl::Status AwaitPlain(MPI_Request* requests, int count,
                        std::chrono::steady_clock::time_point deadline,
                        std::chrono::milliseconds timeout, absl::string_view what) {
  while (true) {
    int done = 0;
    SDRT_MPI_RETURN_IF_ERROR(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " not complete after ", timeout.count(),
                       " ms (a rank missing, or a timeout shorter than the ranks' start?)"));
    }
    std::this_thread::yield();
  }
}

// How long a roll call waits for replies: a quarter of the timeout, within [0.2 s, 2 s].
std::chrono::milliseconds RollCallGrace(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(200),
                                               std::chrono::milliseconds(2000));
}

// Keeps `buffer` for the rest of the process: an abandoned (timed-out) collective may still
// read or write it whenever MPI makes progress. Reachable from a static, so leak checkers
// do not report it.
void KeepForever(std::shared_ptr<void> buffer) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(buffer));
}

// `status`, after keeping `buffer` forever when the collective that uses it timed out.
absl::Status KeptIfTimedOut(absl::Status status, std::shared_ptr<void> buffer) {
  if (status.code() == absl::StatusCode::kDeadlineExceeded) KeepForever(std::move(buffer));
  return status;
}

void FreeComm(MPI_Comm* comm) {
  int finalized = 0;
  if (*comm != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
    MPI_Comm_free(comm);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::World(
    std::chrono::milliseconds timeout) {
  static std::mutex init_mutex;
  std::lock_guard<std::mutex> lock(init_mutex);
  int initialized = 0;
  int finalized = 0;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Initialized(&initialized));
  SDRT_MPI_RETURN_IF_ERROR(MPI_Finalized(&finalized));
  if (finalized) {
    return absl::FailedPreconditionError("MpiCommunicator::World: MPI was already finalized");
  }
  if (!initialized) {
    int provided = 0;
    // MULTIPLE: an embedding program may run calls on two communicators from two threads
    // at once (with SERIALIZED, MPICH's UCX transport aborted on an assertion).
    SDRT_MPI_RETURN_IF_ERROR(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(&FinalizeMpi);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request));
  SDRT_RETURN_IF_ERROR(AwaitPlain(&request, 1, Clock::now() + timeout, timeout,
                                  "MpiCommunicator::World: MPI_Comm_idup(MPI_COMM_WORLD)"));
  return Adopt(ToHandle(comm), timeout);
}

namespace {

absl::Status CheckMpiRunning(absl::string_view op) {
  int initialized = 0;
  int finalized = 0;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Initialized(&initialized));
  SDRT_MPI_RETURN_IF_ERROR(MPI_Finalized(&finalized));
  if (!initialized || finalized) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": MPI is ", finalized ? "already finalized" : "not initialized"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Duplicate(
    const void* mpi_comm, std::chrono::milliseconds timeout) {
  if (mpi_comm == nullptr) {
    return absl::InvalidArgumentError("MpiCommunicator::Duplicate: null MPI_Comm pointer");
  }
  SDRT_RETURN_IF_ERROR(CheckMpiRunning("MpiCommunicator::Duplicate"));
  const MPI_Comm source = *static_cast<const MPI_Comm*>(mpi_comm);
  if (source == MPI_COMM_NULL) {
    return absl::InvalidArgumentError("MpiCommunicator::Duplicate: MPI_COMM_NULL");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Comm_idup(source, &comm, &request));
  SDRT_RETURN_IF_ERROR(AwaitPlain(&request, 1, Clock::now() + timeout, timeout,
                                  "MpiCommunicator::Duplicate: MPI_Comm_idup"));
  return Adopt(ToHandle(comm), timeout);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::DuplicateFortran(
    int64_t fortran_handle, std::chrono::milliseconds timeout) {
  SDRT_RETURN_IF_ERROR(CheckMpiRunning("MpiCommunicator::DuplicateFortran"));
  SDRT_ASSIGN_OR_RETURN(
      const MPI_Comm comm,
      internal::CommFromFortran(fortran_handle, "MpiCommunicator::DuplicateFortran"));
  return Duplicate(&comm, timeout);
}

void MpiCommunicator::AbortJob(int exit_code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);  // every C stream
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is for the type system
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Adopt(
    Handle handle, std::chrono::milliseconds timeout) {
  MPI_Comm comm = ToComm(handle);
  MPI_Comm roll = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  absl::Status status = SDRT_MPI_STATUS(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  if (status.ok()) status = SDRT_MPI_STATUS(MPI_Comm_rank(comm, &rank));
  if (status.ok()) status = SDRT_MPI_STATUS(MPI_Comm_size(comm, &size));
  if (status.ok() && size > 1) {
    MPI_Request request = MPI_REQUEST_NULL;
    status = SDRT_MPI_STATUS(MPI_Comm_idup(comm, &roll, &request));
    if (status.ok()) {
      status = AwaitPlain(&request, 1, Clock::now() + timeout, timeout,
                          "MPI_Comm_idup of the roll-call communicator");
    }
    if (!status.ok()) roll = MPI_COMM_NULL;  // a pending duplicate is not freed
  }
  if (!status.ok()) {
    FreeComm(&comm);
    return status;
  }
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(ToHandle(comm), ToHandle(roll), rank, size, timeout));
}

MpiCommunicator::MpiCommunicator(Handle comm, Handle roll_comm, int rank, int size,
                                 std::chrono::milliseconds timeout)
    : Communicator(rank, size), comm_(comm), roll_comm_(roll_comm) {
  set_timeout(timeout);
}

MpiCommunicator::~MpiCommunicator() {
  // After a timeout the MPI communicators stay until the process ends: freed, their
  // contexts would go to a later communicator (the next job accepted), where a rank of this
  // one that was stopped and wakes up would be heard as one of its ranks.
  if (!timed_out_.empty()) return;
  MPI_Comm comm = ToComm(comm_);
  MPI_Comm roll = ToComm(roll_comm_);
  FreeComm(&roll);
  FreeComm(&comm);
}

absl::Status MpiCommunicator::Begin(absl::string_view op) {
  if (!timed_out_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(op), ": the communicator cannot be used after an earlier timeout (",
                     timed_out_, ")"));
  }
  ++sequence_;
  deadline_ = Clock::now() + timeout();
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Await(absl::string_view op, void* requests_ptr, int count) {
  auto* requests = static_cast<MPI_Request*>(requests_ptr);
  internal::MpiRollCall roll(ToComm(roll_comm_), rank(), size());
  const Clock::time_point start = Clock::now();
  for (int64_t poll = 1;; ++poll) {
    int done = 0;
    SDRT_MPI_RETURN_IF_ERROR(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return absl::OkStatus();
    if (poll % 64 != 0) continue;  // the clock and the roll call every 64 polls
    const Clock::time_point now = Clock::now();
    const int caller = roll.Answer(sequence_);
    if (caller < 0 && now <= deadline_) {
      // Every 64th poll gives the core away to another runnable process, at once: a rank
      // waiting here beside ranks still working on the same cores (more ranks than cores)
      // would otherwise take their time (bench/RESULTS.md: tiny gather and broadcast on 4
      // ranks over 2 cores, 34-50 ms spinning, 25 ms yielding; the same on 2 ranks). With
      // no other process ready the yield returns at once. After 30 s it sleeps instead.
      if (now - start > std::chrono::seconds(30)) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      } else {
        std::this_thread::yield();
      }
      continue;
    }
    const internal::RollCallResult result = roll.Call(sequence_, RollCallGrace(timeout()), caller);
    const std::string why =
        caller < 0 ? absl::StrCat("not complete after ", timeout().count(), " ms")
                   : absl::StrCat("rank ", caller, " gave up waiting after its timeout");
    timed_out_ =
        absl::StrCat(Where(op), ": ", why, "; ", internal::DescribeRollCall(result, sequence_));
    return absl::DeadlineExceededError(timed_out_);
  }
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::SplitComm(absl::string_view op,
                                                                            bool shared, int color,
                                                                            int key) {
  SDRT_RETURN_IF_ERROR(Begin(op));
  MPI_Request request = MPI_REQUEST_NULL;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Ibarrier(ToComm(comm_), &request));
  SDRT_RETURN_IF_ERROR(Await(op, &request, 1));
  MPI_Comm comm = MPI_COMM_NULL;
  if (shared) {
    SDRT_MPI_RETURN_IF_ERROR(
        MPI_Comm_split_type(ToComm(comm_), MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &comm));
  } else {
    SDRT_MPI_RETURN_IF_ERROR(
        MPI_Comm_split(ToComm(comm_), color < 0 ? MPI_UNDEFINED : color, key, &comm));
  }
  if (comm == MPI_COMM_NULL) return std::unique_ptr<MpiCommunicator>();
  return Adopt(ToHandle(comm), timeout());
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::SplitShared() {
  return SplitComm("split_shared", /*shared=*/true, 0, rank());
}

absl::Status MpiCommunicator::BroadcastPieces(absl::string_view op,
                                              const std::vector<Piece>& pieces) {
  const MPI_Comm comm = ToComm(comm_);
  std::vector<MPI_Request> requests;
  absl::Status posted = absl::OkStatus();
  for (const Piece& piece : pieces) {
    char* data = static_cast<char*>(piece.data);
    for (int64_t offset = 0; posted.ok() && offset < piece.bytes; offset += max_message_bytes_) {
      const int count = static_cast<int>(std::min(max_message_bytes_, piece.bytes - offset));
      MPI_Request request;
      posted =
          SDRT_MPI_STATUS(MPI_Ibcast(data + offset, count, MPI_BYTE, piece.root, comm, &request));
      if (posted.ok()) requests.push_back(request);
    }
  }
  // Even after a failed post, what was started completes before its buffers can go.
  SDRT_RETURN_IF_ERROR(Await(op, requests.data(), static_cast<int>(requests.size())));
  return posted;
}

absl::Status MpiCommunicator::GatherEqual(absl::string_view op, void* output, const void* input,
                                          int64_t bytes_per_rank) {
  if (bytes_per_rank > max_message_bytes_) {
    return GatherV(op, output, input, std::vector<int64_t>(size(), bytes_per_rank));
  }
  const int count = static_cast<int>(bytes_per_rank);
  const bool in_place = input == static_cast<char*>(output) + rank() * bytes_per_rank;
  MPI_Request request;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Iallgather(in_place ? MPI_IN_PLACE : input, count, MPI_BYTE, output,
                                          count, MPI_BYTE, ToComm(comm_), &request));
  return Await(op, &request, 1);
}

absl::Status MpiCommunicator::GatherV(absl::string_view op, void* output, const void* input,
                                      absl::Span<const int64_t> byte_counts) {
  char* out = static_cast<char*>(output);
  std::vector<int64_t> offsets(size());
  int64_t total = 0;
  bool one_message = true;  // every count and offset fits MPI's int
  for (int i = 0; i < size(); ++i) {
    offsets[i] = total;
    one_message = one_message && byte_counts[i] <= max_message_bytes_ && total <= INT_MAX;
    total += byte_counts[i];
  }
  char* my_slot = out + offsets[rank()];
  const bool in_place = input == my_slot;
  if (byte_counts[0] <= max_message_bytes_ &&
      std::all_of(byte_counts.begin(), byte_counts.end(),
                  [&](int64_t c) { return c == byte_counts[0]; })) {
    // Equal counts (even FSDP shards): MPI_Iallgather, whose algorithms MPICH tunes better
    // than Iallgatherv's (its ring pipeline stalls when ranks outnumber cores).
    return GatherEqual(op, output, input, byte_counts[0]);
  }
  // Uneven counts: MPI_Iallgatherv only while every count stays under the piece size of
  // MPICH's ring pipeline (32 KiB by default), whose pieces each wait for a scheduler tick
  // when ranks outnumber cores (a broadcast's 550 KB skeleton, gathered with the agreement
  // on 4 ranks and 2 cores: the whole small-workload broadcast took 190 ms with it, 66 ms
  // without); larger ones as one broadcast per rank, all in flight at once.
  const int64_t largest = *std::max_element(byte_counts.begin(), byte_counts.end());
  if (one_message && largest <= kMaxAllgathervCount) {
    // MPI reads the count and displacement arrays until the collective completes.
    auto layout = std::make_shared<std::vector<int>>(byte_counts.begin(), byte_counts.end());
    layout->insert(layout->end(), offsets.begin(), offsets.end());
    const int* counts = layout->data();
    MPI_Request request;
    SDRT_MPI_RETURN_IF_ERROR(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : input, counts[rank()],
                                             MPI_BYTE, output, counts, counts + size(), MPI_BYTE,
                                             ToComm(comm_), &request));
    return KeptIfTimedOut(Await(op, &request, 1), std::move(layout));
  }
  // Every rank broadcasts its slice (in messages of at most max_message_bytes_).
  if (!in_place && byte_counts[rank()] > 0) std::memcpy(my_slot, input, byte_counts[rank()]);
  std::vector<Piece> pieces;
  for (int i = 0; i < size(); ++i) {
    if (byte_counts[i] > 0) pieces.push_back(Piece{out + offsets[i], byte_counts[i], i});
  }
  return BroadcastPieces(op, pieces);
}

absl::Status MpiCommunicator::DoAllGather(void* output, const void* input, int64_t bytes_per_rank) {
  constexpr absl::string_view kOp = "all_gather";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  return GatherEqual(kOp, output, input, bytes_per_rank);
}

absl::Status MpiCommunicator::DoAllGatherV(void* output, const void* input,
                                           absl::Span<const int64_t> byte_counts) {
  constexpr absl::string_view kOp = "all_gather_v";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  return GatherV(kOp, output, input, byte_counts);
}

absl::Status MpiCommunicator::DoBroadcast(absl::Span<const Tensor> tensors, int root) {
  constexpr absl::string_view kOp = "broadcast";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  std::vector<Piece> pieces;
  for (const Tensor& t : tensors) pieces.push_back(Piece{t.data_ptr(), t.nbytes(), root});
  return BroadcastPieces(kOp, pieces);
}

absl::Status MpiCommunicator::DoAllReduce(Tensor& tensor, ReduceOp op) {
  constexpr absl::string_view kOp = "all_reduce";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  const DType dtype = tensor.dtype();
  const MPI_Datatype datatype = ReduceDatatype(dtype);
  ScopedOp custom;
  MPI_Op mpi_op = BuiltinOp(dtype, op);
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    MPI_User_function* combine =
        dtype == DType::kFloat16 ? Combine16For<Half>(op) : Combine16For<BHalf>(op);
    SDRT_MPI_RETURN_IF_ERROR(MPI_Op_create(combine, /*commute=*/1, &custom.op));
    mpi_op = custom.op;
  }
  const int64_t element_size = ElementBits(dtype) / 8;  // a reducible dtype: whole bytes
  // Pieces of at most kAllReducePieceBytes: MPICH's all-reduce of one larger message runs
  // at half the speed of the same bytes in such pieces here (bench/RESULTS.md, "Bucketed
  // Partial all-reduces").
  const int64_t chunk =
      std::max<int64_t>(1, std::min(max_message_bytes_, kAllReducePieceBytes) / element_size);
  char* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t start = 0; start < tensor.numel(); start += chunk) {
    const int count = static_cast<int>(std::min(chunk, tensor.numel() - start));
    MPI_Request request;
    SDRT_MPI_RETURN_IF_ERROR(MPI_Iallreduce(MPI_IN_PLACE, data + start * element_size, count,
                                            datatype, mpi_op, ToComm(comm_), &request));
    SDRT_RETURN_IF_ERROR(Await(kOp, &request, 1));
  }
  if (op == ReduceOp::kAvg) DivideBy(tensor, size());
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoBroadcastBytes(std::string* bytes, int root) {
  constexpr absl::string_view kOp = "broadcast_bytes";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  // The length and the bytes travel through buffers of our own, kept if the broadcast
  // times out (KeepForever), so that the caller's string can go.
  auto length = std::make_shared<int64_t>(static_cast<int64_t>(bytes->size()));
  MPI_Request request;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Ibcast(length.get(), 1, MPI_INT64_T, root, ToComm(comm_), &request));
  SDRT_RETURN_IF_ERROR(KeptIfTimedOut(Await(kOp, &request, 1), length));
  SDRT_RETURN_IF_ERROR(CheckBytesLength(kOp, root, *length));
  if (*length == 0) {
    bytes->clear();
    return absl::OkStatus();
  }
  auto staged = std::make_shared<std::string>(rank() == root ? *bytes : std::string(*length, '\0'));
  SDRT_RETURN_IF_ERROR(
      KeptIfTimedOut(BroadcastPieces(kOp, {Piece{staged->data(), *length, root}}), staged));
  *bytes = std::move(*staged);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MpiCommunicator::DoAllGatherBytes(
    const std::string& mine) {
  constexpr absl::string_view kOp = "all_gather_bytes";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  // Each exchange goes through a buffer of our own (this rank's bytes after everyone's),
  // kept if it times out (KeepForever), so that the caller's buffers can go.
  return AllGatherBytesVia(
      mine, [this, kOp](void* out, const void* in, absl::Span<const int64_t> byte_counts) {
        int64_t total = 0;
        for (int64_t count : byte_counts) total += count;
        const int64_t my_count = byte_counts[rank()];
        auto staged = std::make_shared<std::vector<char>>(total + my_count);
        if (my_count > 0) std::memcpy(staged->data() + total, in, my_count);
        SDRT_RETURN_IF_ERROR(KeptIfTimedOut(
            GatherV(kOp, staged->data(), staged->data() + total, byte_counts), staged));
        if (total > 0) std::memcpy(out, staged->data(), total);
        return absl::OkStatus();
      });
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::DoSplit(int color, int key) {
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> split,
                        SplitComm("split", /*shared=*/false, color, key));
  return std::unique_ptr<Communicator>(std::move(split));
}

absl::Status MpiCommunicator::DoBarrier() {
  constexpr absl::string_view kOp = "barrier";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  MPI_Request request;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Ibarrier(ToComm(comm_), &request));
  return Await(kOp, &request, 1);
}

}  // namespace sdrt
