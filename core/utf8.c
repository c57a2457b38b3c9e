/* Strict UTF-8 over a whole string, for names that did not come through the
 * JSON scanner (percent-decoded path segments and query parameters) and for
 * telling a client why a body was refused. */
#include "utf8.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ffi.h"

int ephd_ffi_utf8_valid(const char *s, size_t len) {
  const char *p = s, *end = s + len;
  while (p < end) {
#if defined(__SSE2__)
    /* Sixteen ASCII bytes at a time: no byte with its high bit set. */
    while (end - p >= 16 &&
           _mm_movemask_epi8(_mm_loadu_si128((const __m128i *)p)) == 0)
      p += 16;
#endif
    while (p < end && (unsigned char)*p < 0x80) p++;
    if (p == end) break;
    size_t n = ephd_utf8_sequence(p, end);
    if (n == 0) return EPHD_E_BAD_REQUEST;
    p += n;
  }
  return EPHD_OK;
}
