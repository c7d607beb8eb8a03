/* sdrt_comm_accept and sdrt_comm_connect from C, run by tests/scripts/two_jobs_test.sh as
 * two mpiexec jobs, and their deadlines run as one job.
 * Usage: c_api_two_jobs MODE PORT_FILE TIMEOUT_SECONDS [OTHER_JOB_RANKS]
 *   accept / connect: meet the other job (of OTHER_JOB_RANKS ranks) and check the merged
 *     communicator's rank and size (the accepting job's ranks first);
 *   accept-alone / connect-alone: nobody comes: SDRT_DEADLINE_EXCEEDED naming the port
 *     file, within the timeout + 2 s, and (accept) no port file left.
 *   accept-second: another job is accepting on PORT_FILE: SDRT_FAILED_PRECONDITION saying
 *     so, at once, and the other job's port file left in place.
 * Exit status 0 when every check holds; 77 when this MPI does not implement dynamic
 * processes (MPI_Open_port "not supported"); 1 with the failed check printed otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sdrt/c_api.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  sdrt_comm_options_t options = SDRT_COMM_OPTIONS_INIT;
  sdrt_comm_t comm = NULL;
  sdrt_status_t status;
  const char* mode;
  const char* port_file;
  int job_rank = 0, job_size = 0, rank = -1, size = -1, alone, second, accepting;
  double start;
  if (argc < 4) {
    fprintf(stderr, "usage: c_api_two_jobs MODE PORT_FILE TIMEOUT [OTHER_JOB_RANKS]\n");
    return 2;
  }
  mode = argv[1];
  port_file = argv[2];
  options.timeout_seconds = atof(argv[3]);
  accepting = strncmp(mode, "accept", 6) == 0;
  alone = strstr(mode, "-alone") != NULL;
  second = strcmp(mode, "accept-second") == 0;
  start = Now();
  status = accepting ? sdrt_comm_accept(port_file, &options, &comm)
                     : sdrt_comm_connect(port_file, &options, &comm);
  MPI_Comm_rank(MPI_COMM_WORLD, &job_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job_size);
  if (status != SDRT_OK && strstr(sdrt_last_error(), "not supported") != NULL) {
    if (job_rank == 0) printf("SKIP: this MPI has no dynamic processes: %s\n", sdrt_last_error());
    return 77;
  }
  if (second) {
    const double took = Now() - start;
    CHECK(status == SDRT_FAILED_PRECONDITION);
    CHECK(strstr(sdrt_last_error(), "another job is accepting on port file") != NULL);
    CHECK(took < 2);
    CHECK(access(port_file, F_OK) == 0);
    if (job_rank == 0) {
      printf("%s: %s after %.2f s: %s\n", mode, sdrt_status_string(status), took,
             sdrt_last_error());
    }
  } else if (alone) {
    const double took = Now() - start;
    CHECK(status == SDRT_DEADLINE_EXCEEDED);
    CHECK(strstr(sdrt_last_error(), port_file) != NULL);
    /* rank 0 waits the whole timeout; the others, started a little later, as long */
    CHECK(took >= options.timeout_seconds - (job_rank == 0 ? 0 : 0.5));
    CHECK(took < options.timeout_seconds + 2);
    CHECK(access(port_file, F_OK) != 0 || !accepting);
    if (job_rank == 0) {
      printf("%s: %s after %.2f s: %s\n", mode, sdrt_status_string(status), took,
             sdrt_last_error());
    }
  } else {
    const int other = argc > 4 ? atoi(argv[4]) : 0;
    CHECK(status == SDRT_OK);
    if (status != SDRT_OK) fprintf(stderr, "%s\n", sdrt_last_error());
    CHECK(sdrt_comm_rank(comm, &rank) == SDRT_OK);
    CHECK(sdrt_comm_size(comm, &size) == SDRT_OK);
    CHECK(size == job_size + other);
    CHECK(rank == (accepting ? job_rank : other + job_rank));
    CHECK(!accepting || access(port_file, F_OK) != 0);
    printf("%s: job rank %d of %d is rank %d of %d\n", mode, job_rank, job_size, rank, size);
    CHECK(sdrt_comm_destroy(comm) == SDRT_OK);
  }
  return failures == 0 ? 0 : 1;
}
