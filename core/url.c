/* Percent-decoding for paths and queries: in C because it walks bytes, which
 * Lua's pattern functions would do off the JIT. */
#include "ffi.h"

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

long ephd_ffi_url_decode(const char *in, size_t len, char *out,
                         int plus_is_space) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    char c = in[i];
    if (c == '%') {
      if (len - i < 3) return EPHD_E_BAD_REQUEST;
      int hi = hexval(in[i + 1]), lo = hexval(in[i + 2]);
      if (hi < 0 || lo < 0) return EPHD_E_BAD_REQUEST;
      out[n++] = (char)(hi << 4 | lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out[n++] = ' ';
    } else {
      out[n++] = c;
    }
  }
  return (long)n;
}
