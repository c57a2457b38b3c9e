#include "uuid.h"

#include "ffi.h"

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A byte's class, and the class each of a canonical UUID's bytes must
 * have (the one statement of the shape, for both functions below):
 * compared all at once, without a branch per byte, as a relayed request's
 * forward mark is checked on every one. */
enum { NOT_UUID, HEX, DASH };
static const unsigned char class_of[256] = {
    ['0' ... '9'] = HEX, ['a' ... 'f'] = HEX, ['-'] = DASH};
static const unsigned char canonical[EPHD_UUID_LEN] = {
    HEX, HEX,  HEX, HEX, HEX, HEX, HEX,  HEX, DASH, HEX, HEX, HEX,
    HEX, DASH, HEX, HEX, HEX, HEX, DASH, HEX, HEX,  HEX, HEX, DASH,
    HEX, HEX,  HEX, HEX, HEX, HEX, HEX,  HEX, HEX,  HEX, HEX, HEX};

int ephd_uuid_canonical(const char *p, size_t len) {
  if (len != EPHD_UUID_LEN) return 0;
  unsigned differ = 0;
  for (size_t i = 0; i < EPHD_UUID_LEN; i++)
    differ |= class_of[(unsigned char)p[i]] ^ canonical[i];
  return differ == 0;
}

int ephd_ffi_uuid_lower(const char *p, size_t len, char *out) {
  if (len != EPHD_UUID_LEN) return EPHD_E_BAD_REQUEST;
  for (size_t i = 0; i < len; i++) {
    if (canonical[i] == DASH) {
      if (p[i] != '-') return EPHD_E_BAD_REQUEST;
      out[i] = '-';
    } else {
      int v = hex_value(p[i]);
      if (v < 0) return EPHD_E_BAD_REQUEST;
      out[i] = "0123456789abcdef"[v];
    }
  }
  return EPHD_OK;
}
