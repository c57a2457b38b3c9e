/* Peer sessions and the forward mark: see mark.h. */
#include "mark.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "uuid.h"

#define PREFIX "ephd-session-1\n"
#define MARK "X-Queen-Forward: "
#define SESSION "X-Queen-Session: "
#define SIG_HEX 64   /* SHA-256's 32 bytes */
#define MS_DIGITS 15 /* the wall clock's milliseconds until the year 33658 */
#define NONCE_HEX 32 /* 16 random bytes */

_Static_assert(sizeof(SESSION) - 1 + MS_DIGITS + 1 + NONCE_HEX + 1 + SIG_HEX +
                       2 ==
                   EPHD_SESSION_LINE,
               "the session line's length");

/* Keyed once: each HMAC duplicates it, which spares hashing the key's two
 * pads each time. NULL without a token. */
static EVP_MAC_CTX *keyed;
/* This broker's authority (host:port of its advertised URL): what a
 * session opened here must be signed for. */
static char self[256];

/* The nonces of the sessions opened here within the window (twice it:
 * the sender's clock may be ahead or behind), so none opens a second.
 * Open addressing; a session is one per connection a member opens, a few
 * hundred a minute in a busy cell, so the table is never near full but
 * under an attack with the token itself, which is refused once it is. */
#define NONCES 4096
typedef struct {
  unsigned char nonce[NONCE_HEX / 2];
  uint64_t until_ms; /* 0: empty */
} seen_t;
static seen_t seen[NONCES];
static uint32_t nseen;

int ephd_mark_init(const char *cell_token, const char *advertise) {
  EVP_MAC_CTX_free(keyed);
  keyed = NULL;
  memset(seen, 0, sizeof(seen));
  nseen = 0;
  const char *a = advertise ? advertise : "";
  if (strncmp(a, "http://", 7) == 0) a += 7;
  size_t n = strlen(a);
  if (n && a[n - 1] == '/') n--;
  snprintf(self, sizeof(self), "%.*s", (int)n, a);
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

static const char HEX[] = "0123456789abcdef";

static void hex(char *out, const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = HEX[b[i] >> 4];
    out[2 * i + 1] = HEX[b[i] & 15];
  }
}

/* Ends c, a duplicate of keyed fed its message, and writes the MAC's hex
 * at out (SIG_HEX bytes): 0, or -1 when libcrypto fails. */
static int final_hex(EVP_MAC_CTX *c, char *out) {
  unsigned char mac[32];
  size_t mac_len = 0;
  int ok = EVP_MAC_final(c, mac, &mac_len, sizeof(mac)) && mac_len == 32;
  EVP_MAC_CTX_free(c);
  hex(out, mac, 32);
  return ok ? 0 : -1;
}

int ephd_mark_hmac_hex(const char *msg, size_t len, char *out) {
  EVP_MAC_CTX *c = keyed ? EVP_MAC_CTX_dup(keyed) : NULL;
  if (c == NULL) return -1;
  add(c, msg, len);
  return final_hex(c, out);
}

size_t ephd_mark_size(size_t tenant_len) {
  return sizeof(MARK) - 1 + tenant_len + 2;
}

char *ephd_mark_write(char *p, const char *tenant, size_t tenant_len) {
  memcpy(p, MARK, sizeof(MARK) - 1);
  p += sizeof(MARK) - 1;
  memcpy(p, tenant, tenant_len);
  p += tenant_len;
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

/* The session's signature of ms, nonce and authority at out (SIG_HEX
 * bytes): 0, or -1 when libcrypto fails. */
static int sign(char *out, const char *ms, const char *nonce,
                const char *authority, size_t authority_len) {
  EVP_MAC_CTX *c = keyed ? EVP_MAC_CTX_dup(keyed) : NULL;
  if (c == NULL) return -1;
  add(c, PREFIX, sizeof(PREFIX) - 1);
  add(c, ms, MS_DIGITS);
  add(c, "\n", 1);
  add(c, nonce, NONCE_HEX);
  add(c, "\n", 1);
  add(c, authority, authority_len);
  return final_hex(c, out);
}

void ephd_mark_session_write(char *out, const char *authority) {
  char *p = out;
  memcpy(p, SESSION, sizeof(SESSION) - 1);
  p += sizeof(SESSION) - 1;
  /* Zero-padded to a fixed width: the line's length is known before. */
  char digits[24];
  size_t n = ephd_u64_format(digits, wall_ms());
  memset(p, '0', MS_DIGITS - n);
  memcpy(p + MS_DIGITS - n, digits, n);
  char *ms = p;
  p += MS_DIGITS;
  *p++ = ' ';
  unsigned char raw[NONCE_HEX / 2];
  char *nonce = p;
  if (RAND_bytes(raw, sizeof(raw)) != 1) memset(raw, 0, sizeof(raw));
  hex(p, raw, sizeof(raw));
  p += NONCE_HEX;
  *p++ = ' ';
  if (sign(p, ms, nonce, authority, strlen(authority)) != 0)
    memset(p, '-', SIG_HEX); /* no memory: a session no member opens */
  p += SIG_HEX;
  *p++ = '\r';
  *p = '\n';
}

static int unhex(unsigned char *out, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int v = 0;
    for (int k = 0; k < 2; k++) {
      char ch = p[2 * i + k];
      int d = ch >= '0' && ch <= '9'   ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                       : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    out[i] = (unsigned char)v;
  }
  return 0;
}

/* Slots never go back to empty, which would cut a probe's chain short and
 * let a nonce further along it pass unseen: an expired entry is taken
 * over in place, and once three quarters of the slots are used the live
 * entries are put into a cleared table. */
static uint32_t slot_of(const unsigned char *nonce) {
  uint32_t h;
  memcpy(&h, nonce, sizeof(h)); /* random bytes: any four hash well */
  return h % NONCES;
}

static void rebuild(uint64_t now) {
  static seen_t live[NONCES];
  uint32_t n = 0;
  for (uint32_t i = 0; i < NONCES; i++)
    if (seen[i].until_ms > now) live[n++] = seen[i];
  memset(seen, 0, sizeof(seen));
  nseen = n;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = slot_of(live[k].nonce);
    while (seen[i].until_ms) i = (i + 1) % NONCES;
    seen[i] = live[k];
  }
}

/* Remembers nonce until until_ms: 0, or -1 when it was seen, or when the
 * table is full of live ones. */
static int remember(const unsigned char *nonce, uint64_t now,
                    uint64_t until_ms) {
  if (nseen >= NONCES * 3 / 4) rebuild(now);
  if (nseen >= NONCES * 3 / 4) return -1;
  uint32_t i = slot_of(nonce), take = UINT32_MAX;
  for (; seen[i].until_ms; i = (i + 1) % NONCES) {
    if (seen[i].until_ms <= now) {
      if (take == UINT32_MAX) take = i;
    } else if (memcmp(seen[i].nonce, nonce, sizeof(seen[i].nonce)) == 0) {
      return -1;
    }
  }
  if (take == UINT32_MAX) {
    take = i; /* the chain's end: an empty slot */
    nseen++;
  }
  memcpy(seen[take].nonce, nonce, sizeof(seen[take].nonce));
  seen[take].until_ms = until_ms;
  return 0;
}

int ephd_mark_session_open(ephd_slice_t session, ephd_slice_t host) {
  if (keyed == NULL) return -1;
  const char *v = session.ptr;
  if (session.len != MS_DIGITS + 1 + NONCE_HEX + 1 + SIG_HEX ||
      v[MS_DIGITS] != ' ' || v[MS_DIGITS + 1 + NONCE_HEX] != ' ')
    return -1;
  /* Signed for this broker, as the sender dialled it. */
  if (host.len != strlen(self) || memcmp(host.ptr, self, host.len) != 0)
    return -1;
  uint64_t at = 0;
  for (size_t i = 0; i < MS_DIGITS; i++) {
    if (v[i] < '0' || v[i] > '9') return -1;
    at = at * 10 + (uint64_t)(v[i] - '0');
  }
  uint64_t now = wall_ms();
  if (at > now + EPHD_MARK_WINDOW_MS || now > at + EPHD_MARK_WINDOW_MS)
    return -1;
  const char *nonce = v + MS_DIGITS + 1;
  unsigned char raw[NONCE_HEX / 2];
  if (unhex(raw, nonce, sizeof(raw)) != 0) return -1;
  char want[SIG_HEX];
  if (sign(want, v, nonce, host.ptr, host.len) != 0 ||
      CRYPTO_memcmp(want, nonce + NONCE_HEX + 1, SIG_HEX) != 0)
    return -1;
  /* Only a signed session is remembered: nobody without the token fills
   * the table. Kept until it could no longer pass the window anyway. */
  return remember(raw, now, at + EPHD_MARK_WINDOW_MS + 1);
}

int ephd_mark_tenant(ephd_slice_t mark, ephd_slice_t *tenant) {
  *tenant = mark;
  return ephd_uuid_canonical(mark.ptr, mark.len) ? EPHD_OK : EPHD_E_BAD_REQUEST;
}
