/* What the C API's tests written in C (C11) share: CHECK(cond) prints the failed
 * condition's line and sdrt's last error, and counts it in `failures`, which the test's
 * exit status reports; CpuFloats describes a float32 CPU buffer. */
#ifndef SDRT_TESTS_C_API_C_CHECK_H_
#define SDRT_TESTS_C_API_C_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "sdrt/c_api.h"

static int failures = 0;

#define CHECK(cond)                                               \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", \
              __FILE__, __LINE__, #cond, sdrt_last_error());      \
      ++failures;                                                 \
    }                                                             \
  } while (0)

/* A contiguous float32 CPU tensor of `ndim` sizes `shape` at `data` (both borrowed). */
static inline DLTensor CpuFloats(float* data, int32_t ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

#endif /* SDRT_TESTS_C_API_C_CHECK_H_ */
