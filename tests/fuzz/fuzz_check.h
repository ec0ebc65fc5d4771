// tests/fuzz/fuzz_check.h — invariant checks shared by the fuzz targets.
//
// FUZZ_CHECK(cond, fmt, ...) prints the broken invariant and aborts: libFuzzer
// reports the abort as a crash and saves the input; the corpus replay driver
// (replay_main.cc, used by the g++ builds) fails its meson test.
#ifndef RDS_TESTS_FUZZ_FUZZ_CHECK_H_
#define RDS_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "\n*** invariant broken at %s:%d: %s\n    ", __FILE__,     \
                   __LINE__, #cond);                                                   \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fputc('\n', stderr);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

namespace rds::fuzz {

// Big-endian reads written independently of engine/wire.cc (the reference the
// codec is checked against).
inline uint64_t RefBe(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace rds::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#endif  // RDS_TESTS_FUZZ_FUZZ_CHECK_H_
