// sdrt/c_api.h: communicators (the MPI world, an MPI_Comm of the program's, two MPI jobs
// that meet through a port file, an engine's ncclComm_t).
#include <chrono>
#include <cmath>
#include <memory>

#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::c_api {
namespace {

absl::StatusOr<std::chrono::milliseconds> Timeout(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds) || seconds > 1e9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.timeout_seconds must be in (0, 1e9] seconds, got ", seconds));
  }
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

absl::StatusOr<std::chrono::milliseconds> TimeoutOf(const sdrt_comm_options_t* options) {
  SDRT_RETURN_IF_ERROR(CheckStructSize(options, "options"));
  return Timeout(options == nullptr ? 600.0 : options->timeout_seconds);
}

template <typename Make>
absl::Status Create(const sdrt_comm_options_t* options, sdrt_comm_t* out, Make make) {
  SDRT_RETURN_IF_ERROR(NotNull(out, "out"));
  SDRT_ASSIGN_OR_RETURN(std::chrono::milliseconds timeout, TimeoutOf(options));
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> comm, make(timeout));
  auto object = std::make_unique<CommObject>();
  object->comm = std::move(comm);
  *out = NewHandle<sdrt_comm_t>(std::move(object));
  return absl::OkStatus();
}

}  // namespace
}  // namespace sdrt::c_api

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

extern "C" {

sdrt_status_t sdrt_comm_create_world(const sdrt_comm_options_t* options, sdrt_comm_t* out) {
  return Guard("sdrt_comm_create_world", [&] {
    return c_api::Create(options, out, [](std::chrono::milliseconds timeout) {
      return sdrt::MpiCommunicator::World(timeout);
    });
  });
}

sdrt_status_t sdrt_comm_create_from_mpi(const void* mpi_comm, const sdrt_comm_options_t* options,
                                        sdrt_comm_t* out) {
  return Guard("sdrt_comm_create_from_mpi", [&] {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(mpi_comm, "mpi_comm"));
    return c_api::Create(options, out, [&](std::chrono::milliseconds timeout) {
      return sdrt::MpiCommunicator::Duplicate(mpi_comm, timeout);
    });
  });
}

sdrt_status_t sdrt_comm_create_from_mpi_fortran(int64_t fortran_handle,
                                                const sdrt_comm_options_t* options,
                                                sdrt_comm_t* out) {
  return Guard("sdrt_comm_create_from_mpi_fortran", [&] {
    return c_api::Create(options, out, [&](std::chrono::milliseconds timeout) {
      return sdrt::MpiCommunicator::DuplicateFortran(fortran_handle, timeout);
    });
  });
}

sdrt_status_t sdrt_comm_accept(const char* port_file, const sdrt_comm_options_t* options,
                               sdrt_comm_t* out) {
  return Guard("sdrt_comm_accept", [&] {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(port_file, "port_file"));
    return c_api::Create(options, out, [&](std::chrono::milliseconds timeout) {
      return sdrt::MpiCommunicator::Accept(port_file, timeout);
    });
  });
}

sdrt_status_t sdrt_comm_connect(const char* port_file, const sdrt_comm_options_t* options,
                                sdrt_comm_t* out) {
  return Guard("sdrt_comm_connect", [&] {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(port_file, "port_file"));
    return c_api::Create(options, out, [&](std::chrono::milliseconds timeout) {
      return sdrt::MpiCommunicator::Connect(port_file, timeout);
    });
  });
}

sdrt_status_t sdrt_comm_create_from_nccl(void* nccl_comm, int rank, int size, int device,
                                         const sdrt_nccl_comm_options_t* options,
                                         sdrt_comm_t* out) {
  return Guard("sdrt_comm_create_from_nccl", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(nccl_comm, "nccl_comm"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_nccl_comm_options_t o =
        options != nullptr ? *options : sdrt_nccl_comm_options_t SDRT_NCCL_COMM_OPTIONS_INIT;
    SDRT_ASSIGN_OR_RETURN(std::chrono::milliseconds timeout, c_api::Timeout(o.timeout_seconds));
    if (o.abort_on_error != 0 && o.abort_on_error != 1) {
      return absl::InvalidArgumentError("options.abort_on_error must be 0 or 1");
    }
    sdrt::NcclCommunicator::AdoptOptions adopt;
    adopt.stream = o.stream;
    adopt.timeout = timeout;
    adopt.abort_on_error = o.abort_on_error == 1;
    SDRT_ASSIGN_OR_RETURN(std::unique_ptr<sdrt::NcclCommunicator> comm,
                          sdrt::NcclCommunicator::Adopt(nccl_comm, rank, size, device, adopt));
    auto object = std::make_unique<c_api::CommObject>();
    object->comm = std::move(comm);
    *out = c_api::NewHandle<sdrt_comm_t>(std::move(object));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_comm_rank(sdrt_comm_t comm, int* rank) {
  return Guard("sdrt_comm_rank", [&] {
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * c, c_api::CommOf(comm, true, "comm"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(rank, "rank"));
    *rank = c->rank();
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_comm_size(sdrt_comm_t comm, int* size) {
  return Guard("sdrt_comm_size", [&] {
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * c, c_api::CommOf(comm, true, "comm"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(size, "size"));
    *size = c->size();
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_comm_destroy(sdrt_comm_t comm) {
  return Guard("sdrt_comm_destroy", [&] { return c_api::DestroyHandle(comm, "comm"); });
}

}  // extern "C"
