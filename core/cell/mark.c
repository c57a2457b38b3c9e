/* The forward mark: see mark.h. */
#include "mark.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "uuid.h"

#define PREFIX "ephd-forward-1\n"
#define HEADER "X-Queen-Forward: "
#define SIG_HEX 64   /* SHA-256's 32 bytes */
#define MS_DIGITS 15 /* the wall clock's milliseconds until the year 33658 */

/* Keyed once: each mark duplicates it, which spares hashing the key's two
 * pads per mark. NULL without a token. */
static EVP_MAC_CTX *keyed;

int ephd_mark_init(const char *cell_token) {
  EVP_MAC_CTX_free(keyed);
  keyed = NULL;
  if (cell_token == NULL) return 0;
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  if (mac == NULL) return -1;
  keyed = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac); /* the context holds its own reference */
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end()};
  if (keyed == NULL || !EVP_MAC_init(keyed, (const unsigned char *)cell_token,
                                     strlen(cell_token), params)) {
    EVP_MAC_CTX_free(keyed);
    keyed = NULL;
    return -1;
  }
  return 0;
}

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void add(EVP_MAC_CTX *c, const char *p, size_t n) {
  EVP_MAC_update(c, (const unsigned char *)p, n);
}

/* Ends c, a duplicate of keyed fed its message, and writes the MAC's hex
 * at out (SIG_HEX bytes): 0, or -1 when libcrypto fails. */
static int final_hex(EVP_MAC_CTX *c, char *out) {
  unsigned char mac[32];
  size_t mac_len = 0;
  int ok = EVP_MAC_final(c, mac, &mac_len, sizeof(mac)) && mac_len == 32;
  EVP_MAC_CTX_free(c);
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < 32; i++) {
    out[2 * i] = hex[mac[i] >> 4];
    out[2 * i + 1] = hex[mac[i] & 15];
  }
  return ok ? 0 : -1;
}

/* The signature's hex of what mark.h lists, at out (SIG_HEX bytes): 0, or
 * -1 when libcrypto fails (no memory). */
static int sign(char *out, const char *ms, size_t ms_len, const char *tenant,
                size_t tenant_len, ephd_slice_t method, ephd_slice_t path,
                ephd_slice_t query, size_t body_len) {
  EVP_MAC_CTX *c = EVP_MAC_CTX_dup(keyed);
  if (c == NULL) return -1;
  char len[24];
  size_t len_n = ephd_u64_format(len, body_len);
  add(c, PREFIX, sizeof(PREFIX) - 1);
  add(c, ms, ms_len);
  add(c, "\n", 1);
  add(c, tenant, tenant_len);
  add(c, "\n", 1);
  add(c, method.ptr, method.len);
  add(c, "\n", 1);
  add(c, path.ptr, path.len);
  if (query.len) {
    add(c, "?", 1);
    add(c, query.ptr, query.len);
  }
  add(c, "\n", 1);
  add(c, len, len_n);
  return final_hex(c, out);
}

int ephd_mark_hmac_hex(const char *msg, size_t len, char *out) {
  EVP_MAC_CTX *c = keyed ? EVP_MAC_CTX_dup(keyed) : NULL;
  if (c == NULL) return -1;
  add(c, msg, len);
  return final_hex(c, out);
}

size_t ephd_mark_size(size_t tenant_len) {
  return sizeof(HEADER) - 1 + tenant_len + 1 + MS_DIGITS + 1 + SIG_HEX + 2;
}

/* The mark's line from its time on, at p, for a tenant written before it:
 * the time now, the signature and the line's end, which it returns. */
static char *stamp(char *p, const char *tenant, size_t tenant_len,
                   ephd_slice_t method, ephd_slice_t target, size_t body_len) {
  /* Zero-padded to a fixed width: the line's length is known before. */
  char ms[24];
  size_t n = ephd_u64_format(ms, wall_ms());
  memset(p, '0', MS_DIGITS - n);
  memcpy(p + MS_DIGITS - n, ms, n);
  char *ms_at = p;
  p += MS_DIGITS;
  *p++ = ' ';
  const char *q = memchr(target.ptr, '?', target.len);
  ephd_slice_t path = {target.ptr, q ? (size_t)(q - target.ptr) : target.len};
  ephd_slice_t query = {q ? q + 1 : "", q ? target.len - path.len - 1 : 0};
  if (sign(p, ms_at, MS_DIGITS, tenant, tenant_len, method, path, query,
           body_len) != 0)
    memset(p, '-', SIG_HEX); /* no memory: a mark no member trusts */
  p += SIG_HEX;
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

char *ephd_mark_write(char *p, const char *tenant, size_t tenant_len,
                      ephd_slice_t method, ephd_slice_t target,
                      size_t body_len) {
  memcpy(p, HEADER, sizeof(HEADER) - 1);
  p += sizeof(HEADER) - 1;
  memcpy(p, tenant, tenant_len);
  p += tenant_len;
  *p++ = ' ';
  return stamp(p, tenant, tenant_len, method, target, body_len);
}

char *ephd_mark_blank(char *p, const char *tenant, size_t tenant_len) {
  memcpy(p, HEADER, sizeof(HEADER) - 1);
  p += sizeof(HEADER) - 1;
  memcpy(p, tenant, tenant_len);
  p += tenant_len;
  *p++ = ' ';
  memset(p, '0', MS_DIGITS);
  p += MS_DIGITS;
  *p++ = ' ';
  memset(p, '-', SIG_HEX);
  p += SIG_HEX;
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

void ephd_mark_restamp(char *headers, size_t len, ephd_slice_t method,
                       ephd_slice_t target, size_t body_len) {
  size_t h = sizeof(HEADER) - 1, tail = 1 + MS_DIGITS + 1 + SIG_HEX + 2;
  if (len < h + tail || memcmp(headers, HEADER, h) != 0) return;
  const char *end = memchr(headers, '\n', len);
  if (end == NULL || (size_t)(end + 1 - headers) < h + tail) return;
  char *ms = (char *)end + 1 - tail + 1;
  stamp(ms, headers + h, (size_t)(ms - 1 - headers - h), method, target,
        body_len);
}

int ephd_mark_verify(ephd_slice_t mark, ephd_slice_t method, ephd_slice_t path,
                     ephd_slice_t query, size_t body_len,
                     ephd_slice_t *tenant) {
  if (keyed == NULL) return EPHD_E_REFUSED;
  /* From the end: the signature, the time, and the tenant before them. */
  const char *m = mark.ptr;
  size_t len = mark.len;
  if (len < SIG_HEX + 1 + MS_DIGITS + 1 + 1) return EPHD_E_REFUSED;
  const char *sig = m + len - SIG_HEX;
  const char *ms = sig - 1 - MS_DIGITS;
  if (sig[-1] != ' ' || ms[-1] != ' ') return EPHD_E_REFUSED;
  uint64_t at = 0;
  for (size_t i = 0; i < MS_DIGITS; i++) {
    if (ms[i] < '0' || ms[i] > '9') return EPHD_E_REFUSED;
    at = at * 10 + (uint64_t)(ms[i] - '0');
  }
  uint64_t now = wall_ms();
  if (at > now + EPHD_MARK_WINDOW_MS || now > at + EPHD_MARK_WINDOW_MS)
    return EPHD_E_REFUSED;
  ephd_slice_t t = {m, (size_t)(ms - 1 - m)};
  char want[SIG_HEX];
  if (sign(want, ms, MS_DIGITS, t.ptr, t.len, method, path, query, body_len) !=
          0 ||
      CRYPTO_memcmp(want, sig, SIG_HEX) != 0)
    return EPHD_E_REFUSED;
  *tenant = t;
  return ephd_uuid_canonical(t.ptr, t.len) ? EPHD_OK : EPHD_E_BAD_REQUEST;
}
