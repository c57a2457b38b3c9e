/* The HTTP request path as a whole: any bytes in, answers or a closed
 * connection out. The first byte chooses how the rest is torn across
 * writes. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  ephd_fuzz_exchange(data + 1, size - 1, data[0]);
  return 0;
}
