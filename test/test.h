/* A libuv-style test harness: one runner binary, TEST_IMPL functions, and
 * two-operand assertions that print both sides on failure. */
#ifndef EPHD_TEST_H
#define EPHD_TEST_H

#include <stdio.h>
#include <string.h>

#define TEST_IMPL(name) int run_test_##name(void)

#define ASSERT(expr)                                                       \
  do {                                                                     \
    if (!(expr)) {                                                         \
      fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, \
              #expr);                                                      \
      return 1;                                                            \
    }                                                                      \
  } while (0)

#define ASSERT_OP(a, op, b)                                                   \
  do {                                                                        \
    long long a_ = (long long)(a), b_ = (long long)(b);                       \
    if (!(a_ op b_)) {                                                        \
      fprintf(stderr, "%s:%d: %s %s %s (%lld vs %lld)\n", __FILE__, __LINE__, \
              #a, #op, #b, a_, b_);                                           \
      return 1;                                                               \
    }                                                                         \
  } while (0)

#define ASSERT_EQ(a, b) ASSERT_OP(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_OP(a, !=, b)
#define ASSERT_GE(a, b) ASSERT_OP(a, >=, b)

#define ASSERT_MEM_EQ(p, n, lit)                                      \
  do {                                                                \
    size_t n_ = (n);                                                  \
    if (n_ != strlen(lit) || memcmp((p), (lit), n_) != 0) {           \
      fprintf(stderr, "%s:%d: got \"%.*s\", want \"%s\"\n", __FILE__, \
              __LINE__, (int)n_, (const char *)(p), (lit));           \
      return 1;                                                       \
    }                                                                 \
  } while (0)

#endif
