/* Runs one named test (as CTest does) or all of them. */
#include <stdio.h>
#include <string.h>

#define TEST_ENTRY(name) int run_test_##name(void);
#include "list.h"
#undef TEST_ENTRY

static const struct {
  const char *name;
  int (*fn)(void);
} tests[] = {
#define TEST_ENTRY(name) {#name, run_test_##name},
#include "list.h"
#undef TEST_ENTRY
};

int main(int argc, char **argv) {
  int failed = 0, ran = 0;
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
    ran++;
    int rc = tests[i].fn();
    printf("%s %s\n", rc ? "not ok" : "ok", tests[i].name);
    failed += rc != 0;
  }
  if (ran == 0) {
    fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(any)");
    return 2;
  }
  return failed ? 1 : 0;
}
