#include "sdrt/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/internal/float16.h"
#include "sdrt/comm/internal/mpi_check.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

static_assert(sizeof(MPI_Comm) <= sizeof(intptr_t), "MPI_Comm must fit the opaque handle");

MPI_Comm ToComm(intptr_t handle) {
  MPI_Comm comm;
  std::memcpy(&comm, &handle, sizeof(comm));
  return comm;
}

intptr_t ToHandle(MPI_Comm comm) {
  intptr_t handle = 0;
  std::memcpy(&handle, &comm, sizeof(comm));
  return handle;
}

void FinalizeMpi() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

// The MPI datatype each dtype is reduced as, in SDRT_DTYPE_TABLE order (-Wswitch keeps the
// list complete). The 16-bit floats travel as their bit patterns and are combined by the
// user-defined ops below; float8 is rejected by Communicator::AllReduce.
MPI_Datatype ReduceDatatype(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return MPI_UINT8_T;  // 0 or 1, reduced with MPI_MAX / MPI_MIN
    case DType::kUInt8:
      return MPI_UINT8_T;
    case DType::kInt8:
      return MPI_INT8_T;
    case DType::kInt16:
      return MPI_INT16_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kFloat16:
    case DType::kBFloat16:
      return MPI_UINT16_T;
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
      return MPI_DATATYPE_NULL;
  }
  return MPI_DATATYPE_NULL;
}

// A built-in op; bool maps sum to max (or) and product to min (and) like ProcessGroupNCCL.
// kAvg reduces with MPI_SUM and divides afterwards.
MPI_Op BuiltinOp(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return dtype == DType::kBool ? MPI_MAX : MPI_SUM;
    case ReduceOp::kProduct:
      return dtype == DType::kBool ? MPI_MIN : MPI_PROD;
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
void DivideAll(T* data, int64_t count, int n) {
  for (int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / n);
}

template <typename Format>
void Divide16(uint16_t* data, int64_t count, int n) {
  for (int64_t i = 0; i < count; ++i) {
    data[i] = Format::FromFloat(Format::ToFloat(data[i]) / static_cast<float>(n));
  }
}

void DivideBy(Tensor& tensor, int n) {
  const int64_t count = tensor.numel();
  switch (tensor.dtype()) {
    case DType::kUInt8:
      return DivideAll(tensor.data<uint8_t>(), count, n);
    case DType::kInt8:
      return DivideAll(tensor.data<int8_t>(), count, n);
    case DType::kInt16:
      return DivideAll(tensor.data<int16_t>(), count, n);
    case DType::kInt32:
      return DivideAll(tensor.data<int32_t>(), count, n);
    case DType::kInt64:
      return DivideAll(tensor.data<int64_t>(), count, n);
    case DType::kFloat16:
      return Divide16<Half>(tensor.data<uint16_t>(), count, n);
    case DType::kBFloat16:
      return Divide16<BHalf>(tensor.data<uint16_t>(), count, n);
    case DType::kFloat32:
      return DivideAll(tensor.data<float>(), count, n);
    case DType::kFloat64:
      return DivideAll(tensor.data<double>(), count, n);
    case DType::kBool:  // rejected by Communicator::AllReduce
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
      return;
  }
}

absl::Status ConfigureComm(MPI_Comm comm, int* rank, int* size) {
  SDRT_MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  SDRT_MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm, rank));
  SDRT_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, size));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::World() {
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
    SDRT_MPI_RETURN_IF_ERROR(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    std::atexit(&FinalizeMpi);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  int rank = 0;
  int size = 0;
  if (absl::Status s = ConfigureComm(comm, &rank, &size); !s.ok()) {
    MPI_Comm_free(&comm);
    return s;
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(ToHandle(comm), rank, size));
}

MpiCommunicator::MpiCommunicator(Handle comm, int rank, int size)
    : Communicator(rank, size), comm_(comm) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Comm comm = ToComm(comm_);
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&comm);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::SplitShared() {
  MPI_Comm comm = MPI_COMM_NULL;
  SDRT_MPI_RETURN_IF_ERROR(
      MPI_Comm_split_type(ToComm(comm_), MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &comm));
  int rank = 0;
  int size = 0;
  if (absl::Status s = ConfigureComm(comm, &rank, &size); !s.ok()) {
    MPI_Comm_free(&comm);
    return s;
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(ToHandle(comm), rank, size));
}

absl::Status MpiCommunicator::BroadcastPieces(const std::vector<Piece>& pieces) {
  const MPI_Comm comm = ToComm(comm_);
  std::vector<MPI_Request> requests;
  for (const Piece& piece : pieces) {
    char* data = static_cast<char*>(piece.data);
    for (int64_t offset = 0; offset < piece.bytes; offset += max_message_bytes_) {
      const int count = static_cast<int>(std::min(max_message_bytes_, piece.bytes - offset));
      MPI_Request request;
      const int result = MPI_Ibcast(data + offset, count, MPI_BYTE, piece.root, comm, &request);
      if (result != MPI_SUCCESS) {
        // Complete what was started so that no request outlives its buffer.
        MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
        return SDRT_MPI_STATUS(result);
      }
      requests.push_back(request);
    }
  }
  SDRT_MPI_RETURN_IF_ERROR(
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoAllGather(void* output, const void* input, int64_t bytes_per_rank) {
  if (bytes_per_rank > max_message_bytes_) {
    return DoAllGatherV(output, input, std::vector<int64_t>(size(), bytes_per_rank));
  }
  const int count = static_cast<int>(bytes_per_rank);
  const bool in_place = input == static_cast<char*>(output) + rank() * bytes_per_rank;
  SDRT_MPI_RETURN_IF_ERROR(MPI_Allgather(in_place ? MPI_IN_PLACE : input, count, MPI_BYTE, output,
                                         count, MPI_BYTE, ToComm(comm_)));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoAllGatherV(void* output, const void* input,
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
    // Equal counts (even FSDP shards): MPI_Allgather, whose algorithms MPICH tunes better
    // than Allgatherv's (its ring pipeline stalls when ranks outnumber cores).
    return DoAllGather(output, input, byte_counts[0]);
  }
  if (one_message) {
    std::vector<int> counts(byte_counts.begin(), byte_counts.end());
    std::vector<int> displacements(offsets.begin(), offsets.end());
    SDRT_MPI_RETURN_IF_ERROR(MPI_Allgatherv(in_place ? MPI_IN_PLACE : input, counts[rank()],
                                            MPI_BYTE, output, counts.data(), displacements.data(),
                                            MPI_BYTE, ToComm(comm_)));
    return absl::OkStatus();
  }
  // Too large for one MPI_Allgatherv: every rank broadcasts its slice in messages.
  if (!in_place && byte_counts[rank()] > 0) std::memcpy(my_slot, input, byte_counts[rank()]);
  std::vector<Piece> pieces;
  for (int i = 0; i < size(); ++i) {
    if (byte_counts[i] > 0) pieces.push_back(Piece{out + offsets[i], byte_counts[i], i});
  }
  return BroadcastPieces(pieces);
}

absl::Status MpiCommunicator::DoBroadcast(absl::Span<const Tensor> tensors, int root) {
  std::vector<Piece> pieces;
  for (const Tensor& t : tensors) pieces.push_back(Piece{t.data_ptr(), t.nbytes(), root});
  return BroadcastPieces(pieces);
}

absl::Status MpiCommunicator::DoAllReduce(Tensor& tensor, ReduceOp op) {
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
  const int64_t element_size = tensor.element_size();
  const int64_t chunk = std::max<int64_t>(1, max_message_bytes_ / element_size);
  char* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t start = 0; start < tensor.numel(); start += chunk) {
    const int count = static_cast<int>(std::min(chunk, tensor.numel() - start));
    SDRT_MPI_RETURN_IF_ERROR(MPI_Allreduce(MPI_IN_PLACE, data + start * element_size, count,
                                           datatype, mpi_op, ToComm(comm_)));
  }
  if (op == ReduceOp::kAvg) DivideBy(tensor, size());
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoBroadcastBytes(std::string* bytes, int root) {
  int64_t length = static_cast<int64_t>(bytes->size());
  SDRT_MPI_RETURN_IF_ERROR(MPI_Bcast(&length, 1, MPI_INT64_T, root, ToComm(comm_)));
  SDRT_RETURN_IF_ERROR(CheckBytesLength("broadcast_bytes", root, length));
  if (rank() != root) bytes->assign(length, '\0');
  if (length == 0) return absl::OkStatus();
  return BroadcastPieces({Piece{bytes->data(), length, root}});
}

absl::StatusOr<std::vector<std::string>> MpiCommunicator::DoAllGatherBytes(
    const std::string& mine) {
  return AllGatherBytesVia(
      mine, [this](void* out, const void* in, absl::Span<const int64_t> byte_counts) {
        return DoAllGatherV(out, in, byte_counts);
      });
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::DoSplit(int color, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  SDRT_MPI_RETURN_IF_ERROR(
      MPI_Comm_split(ToComm(comm_), color < 0 ? MPI_UNDEFINED : color, key, &comm));
  if (comm == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  int rank = 0;
  int size = 0;
  if (absl::Status s = ConfigureComm(comm, &rank, &size); !s.ok()) {
    MPI_Comm_free(&comm);
    return s;
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(ToHandle(comm), rank, size));
}

absl::Status MpiCommunicator::DoBarrier() {
  SDRT_MPI_RETURN_IF_ERROR(MPI_Barrier(ToComm(comm_)));
  return absl::OkStatus();
}

}  // namespace sdrt
