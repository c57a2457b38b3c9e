/* Strict UTF-8 (RFC 3629), what names and the strings inside payloads must
 * be: no overlong form, no surrogate (ED A0..BF), nothing above U+10FFFF,
 * no truncated sequence. A name that is not UTF-8 would make every answer
 * that lists it unparseable for every client of the tenant. */
#ifndef EPHD_UTF8_H
#define EPHD_UTF8_H

#include <stddef.h>

/* The length of the well-formed sequence at p, whose lead byte is 0x80 or
 * above, or 0 when it is not one. The bytes after the lead must be 80..BF,
 * and the code point they spell (its last six bits do not matter) must
 * need that many bytes: no overlong form, no surrogate, nothing above
 * U+10FFFF. */
static inline size_t ephd_utf8_sequence(const char *p, const char *end) {
  const unsigned char *s = (const unsigned char *)p;
  size_t left = (size_t)(end - p);
  unsigned lead = s[0], cp;
  if (lead < 0xC2) return 0; /* a continuation byte, or overlong C0, C1 */
  if (lead < 0xE0)           /* U+0080..U+07FF */
    return left >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  if (lead < 0xF0) { /* U+0800..U+FFFF, but the surrogates D800..DFFF */
    if (left < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    cp = (lead & 0x0F) << 12 | (s[1] & 0x3Fu) << 6;
    return cp >= 0x800 && (cp & 0xF800) != 0xD800 ? 3 : 0;
  }
  if (lead < 0xF5) { /* U+10000..U+10FFFF */
    if (left < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
        (s[3] & 0xC0) != 0x80)
      return 0;
    cp = (lead & 0x07) << 18 | (s[1] & 0x3Fu) << 12;
    return cp >= 0x10000 && cp <= 0x10FFFF ? 4 : 0;
  }
  return 0; /* F5..FF begin nothing */
}

#endif
