// MpiCommunicator::Accept and Connect: two separately launched MPI jobs meeting through a
// port file (the protocol: comm/internal/port_file.h).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sdrt/comm/internal/mpi_check.h"
#include "sdrt/comm/internal/port_file.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using Clock = std::chrono::steady_clock;
using internal::ToComm;
using internal::ToHandle;

// How often rank 0 looks at the port files.
constexpr auto kPoll = std::chrono::milliseconds(10);
// How much longer than the wait the other ranks give rank 0 to report its outcome.
constexpr auto kGrace = std::chrono::seconds(5);

// Runs an MPI call that reports on no communicator (MPI_Open_port, MPI_Close_port: MPI
// raises their errors on MPI_COMM_SELF or MPI_COMM_WORLD, whose handler is the program's)
// with MPI_ERRORS_RETURN on both, then puts the program's handlers back.
template <typename Call>
absl::Status WithErrorsReturned(Call call) {
  MPI_Errhandler world = MPI_ERRHANDLER_NULL;
  MPI_Errhandler self = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  absl::Status status = call();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
  MPI_Errhandler_free(&world);
  MPI_Errhandler_free(&self);
  return status;
}

absl::Status Annotated(const absl::Status& status, absl::string_view op) {
  return absl::Status(status.code(), absl::StrCat(op, ": ", status.message()));
}

// Rank 0's outcome, `status`, on every rank of `job` (rank 0 passes its own). The others wait
// for it up to the wait rank 0 makes plus kGrace.
absl::Status ShareOutcome(Communicator& job, const absl::Status& status,
                          std::chrono::milliseconds wait) {
  std::string bytes;
  if (job.rank() == 0 && !status.ok()) {
    bytes = absl::StrCat(static_cast<int>(status.code()), " ", status.message());
  }
  job.set_timeout(wait + kGrace);
  SDRT_RETURN_IF_ERROR(job.BroadcastBytes(&bytes, 0));
  if (job.rank() == 0 || bytes.empty()) return status;
  const size_t space = bytes.find(' ');
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  if (space != std::string::npos && absl::SimpleAtoi(bytes.substr(0, space), &code)) {
    bytes = bytes.substr(space + 1);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), bytes);
}

// Accept's rank 0 up to the accept: opens `port`, writes it to `path` and waits until a
// connector claims it.
absl::Status OfferPort(const std::string& path, char* port, bool* opened,
                       Clock::time_point deadline, std::chrono::milliseconds timeout) {
  SDRT_RETURN_IF_ERROR(internal::CheckReplaceable(path));
  const std::string claimed = internal::ClaimedPath(path);
  absl::StatusOr<std::string> stale = internal::ReadPortFile(claimed, MPI_MAX_PORT_NAME);
  if (stale.status().code() != absl::StatusCode::kNotFound) {
    return absl::FailedPreconditionError(absl::StrCat(
        claimed, " exists (a claim left by a job that died?); remove it once no job uses ",
        path));
  }
  absl::Status status = WithErrorsReturned(
      [&] { return SDRT_MPI_STATUS(MPI_Open_port(MPI_INFO_NULL, port)); });
  if (!status.ok()) {
    return Annotated(status, "this MPI may not implement dynamic processes (MPICH 4.0's "
                             "ch4:ucx does not); MPI_Open_port");
  }
  *opened = true;
  SDRT_RETURN_IF_ERROR(internal::WritePortFile(path, port, MPI_MAX_PORT_NAME));
  while (true) {
    absl::StatusOr<std::string> claim = internal::ReadPortFile(claimed, MPI_MAX_PORT_NAME);
    if (claim.ok() && *claim == port) return absl::OkStatus();
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no job connected through port file ", path, " within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

// Connect's rank 0: the port name in `path` once it appears, claimed.
absl::StatusOr<std::string> ClaimPort(const std::string& path, Clock::time_point deadline,
                                      std::chrono::milliseconds timeout) {
  std::string why = "it did not appear";
  while (true) {
    absl::StatusOr<std::string> port = internal::ReadPortFile(path, MPI_MAX_PORT_NAME);
    if (port.ok()) {
      absl::Status claim = internal::Claim(path);
      if (claim.ok()) return port;
      why = claim.code() == absl::StatusCode::kNotFound
                ? "it appeared, but was claimed or removed before this job could claim it"
                : std::string(claim.message());
    } else if (port.status().code() != absl::StatusCode::kNotFound) {
      return port.status();
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", timeout.count(),
                                                      " ms for port file ", path, ": ", why));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

// The milliseconds left until `deadline`, at least 1 s (MPI's "timeout" info is seconds).
std::string SecondsLeft(Clock::time_point deadline) {
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  return std::to_string(static_cast<long long>(std::max(1.0, std::ceil(left))));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Accept(
    const std::string& port_file, std::chrono::milliseconds timeout) {
  constexpr absl::string_view kOp = "MpiCommunicator::Accept";
  if (port_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": port_file is empty"));
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> job, World(timeout));
  char port[MPI_MAX_PORT_NAME] = {};
  bool opened = false;
  std::optional<internal::PortLock> lock;  // rank 0's, from before the port file to its removal
  // Rank 0 closes the port and removes the files it wrote (once they still hold its port),
  // then lets go of the port file.
  const auto close_port = [&] {
    if (opened) {
      WithErrorsReturned([&] { return SDRT_MPI_STATUS(MPI_Close_port(port)); }).IgnoreError();
      internal::RemoveIfHolds(internal::ClaimedPath(port_file), port, MPI_MAX_PORT_NAME)
          .IgnoreError();
      internal::RemoveIfHolds(port_file, port, MPI_MAX_PORT_NAME).IgnoreError();
      opened = false;
    }
    lock.reset();
  };
  absl::Status status;
  if (job->rank() == 0) {
    absl::StatusOr<internal::PortLock> taken = internal::PortLock::Take(port_file);
    status = taken.status();
    if (taken.ok()) {
      lock.emplace(*std::move(taken));
      status = OfferPort(port_file, port, &opened, deadline, timeout);
    }
    // Before the others learn of a failure: no rank returns while the file is still there.
    if (!status.ok()) close_port();
  }
  status = ShareOutcome(*job, status, timeout);
  MPI_Comm inter = MPI_COMM_NULL;
  if (status.ok()) {
    status = SDRT_MPI_STATUS(
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, ToComm(job->comm_), &inter));
  }
  close_port();
  if (!status.ok()) return Annotated(status, kOp);
  return Merge(ToHandle(inter), /*accepting=*/true, timeout);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Connect(
    const std::string& port_file, std::chrono::milliseconds timeout) {
  constexpr absl::string_view kOp = "MpiCommunicator::Connect";
  if (port_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": port_file is empty"));
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> job, World(timeout));
  std::string port;
  absl::Status status;
  if (job->rank() == 0) {
    absl::StatusOr<std::string> claimed = ClaimPort(port_file, deadline, timeout);
    if (claimed.ok()) port = *std::move(claimed);
    status = claimed.status();
  }
  status = ShareOutcome(*job, status, timeout);
  if (!status.ok()) return Annotated(status, kOp);
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "timeout", SecondsLeft(deadline).c_str());
  MPI_Comm inter = MPI_COMM_NULL;
  status = SDRT_MPI_STATUS(MPI_Comm_connect(port.c_str(), info, 0, ToComm(job->comm_), &inter));
  MPI_Info_free(&info);
  if (!status.ok()) {
    // MPI says no more than "other error" for a port of a job that has ended or a name
    // that is no port at all.
    status = Annotated(status, absl::StrCat("port file ", port_file,
                                            " (left by a job that has ended, or not a port "
                                            "name?)"));
    // The claim is this job's (rank 0 renamed the port file to it): a port nobody accepts
    // on (a file holding no port, an acceptor gone) would otherwise block every later
    // Accept on that path.
    if (job->rank() == 0) {
      internal::RemoveIfHolds(internal::ClaimedPath(port_file), port, MPI_MAX_PORT_NAME)
          .IgnoreError();
    }
    return Annotated(status, kOp);
  }
  return Merge(ToHandle(inter), /*accepting=*/false, timeout);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Merge(
    Handle inter_handle, bool accepting, std::chrono::milliseconds timeout) {
  MPI_Comm inter = ToComm(inter_handle);
  MPI_Comm merged = MPI_COMM_NULL;
  absl::Status status = SDRT_MPI_STATUS(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
  if (status.ok()) {
    status = SDRT_MPI_STATUS(MPI_Intercomm_merge(inter, accepting ? 0 : 1, &merged));
  }
  MPI_Comm_free(&inter);
  if (!status.ok()) return status;
  return Adopt(ToHandle(merged), timeout);
}

}  // namespace sdrt
