// CHECK: the channel for broken invariants. A failed CHECK is a bug in infercept, never a
// consequence of user input (that goes through Result<T>), so it aborts with file:line and
// the failed condition instead of trying to recover.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace infercept::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const char* msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s%s%s\n", file, line, cond, msg[0] ? " -- " : "",
               msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace infercept::detail

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) ::infercept::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define CHECK_MSG(cond, msg)                                                          \
  do {                                                                                \
    if (!(cond)) ::infercept::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#define CHECK_EQ(a, b) CHECK((a) == (b))
#define CHECK_LE(a, b) CHECK((a) <= (b))
#define CHECK_LT(a, b) CHECK((a) < (b))
#define CHECK_GE(a, b) CHECK((a) >= (b))
#define CHECK_GT(a, b) CHECK((a) > (b))

#ifdef NDEBUG
#define DCHECK(cond) \
  do {               \
  } while (0)
#else
#define DCHECK(cond) CHECK(cond)
#endif
