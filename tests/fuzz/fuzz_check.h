// The invariant check of the libFuzzer targets in tests/fuzz: a broken invariant prints
// what failed and aborts, which libFuzzer reports as a crash and saves the input.
#ifndef SDRT_TESTS_FUZZ_FUZZ_CHECK_H_
#define SDRT_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define SDRT_FUZZ_CHECK(condition)                                                      \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (false)

#endif  // SDRT_TESTS_FUZZ_FUZZ_CHECK_H_
