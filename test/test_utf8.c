#include <stdlib.h>

#include "buf.h"
#include "ffi.h"
#include "json.h"
#include "test.h"

/* Every class of sequence RFC 3629 refuses, and the edges of what it
 * allows, as the bytes between a JSON string's quotes. */
static const char *const invalid[] = {
    "\x80",             /* a lone continuation byte */
    "\xbf",             /* the last continuation byte */
    "\xc0\x80",         /* overlong U+0000 */
    "\xc1\xbf",         /* overlong U+007F */
    "\xe0\x80\x80",     /* overlong three bytes */
    "\xe0\x9f\xbf",     /* overlong U+07FF */
    "\xf0\x80\x80\x80", /* overlong four bytes */
    "\xf0\x8f\xbf\xbf", /* overlong U+FFFF */
    "\xed\xa0\x80",     /* U+D800, a surrogate */
    "\xed\xbf\xbf",     /* U+DFFF, a surrogate */
    "\xf4\x90\x80\x80", /* U+110000 */
    "\xf7\xbf\xbf\xbf", /* above U+10FFFF */
    "\xf5\x80\x80\x80", /* F5..FF lead nothing */
    "\xf8\x88\x80\x80\x80",
    "\xfe",
    "\xff",
    "\xc3",          /* truncated: two bytes, one present */
    "\xe6\x97",      /* truncated: three bytes, two present */
    "\xf0\x9f\x98",  /* truncated: four bytes, three present */
    "\xc3x",         /* a lead then ASCII */
    "\xe6x\x97",     /* ASCII inside a sequence */
    "\xf0\x9f\x98x", /* ASCII as the last byte */
    "\xc3\xa9\xa9",  /* one continuation byte too many */
};
static const char *const valid[] = {
    "\xc2\x80",         /* U+0080, the first two-byte character */
    "\xc3\xa9",         /* U+00E9 */
    "\xdf\xbf",         /* U+07FF, the last two-byte character */
    "\xe0\xa0\x80",     /* U+0800, the first three-byte character */
    "\xe6\x97\xa5",     /* U+65E5 */
    "\xed\x9f\xbf",     /* U+D7FF, just below the surrogates */
    "\xee\x80\x80",     /* U+E000, just above them */
    "\xef\xbf\xbf",     /* U+FFFF */
    "\xf0\x90\x80\x80", /* U+10000, the first four-byte character */
    "\xf0\x9f\x98\x80", /* U+1F600 */
    "\xf4\x8f\xbf\xbf", /* U+10FFFF, the last character */
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

TEST_IMPL(utf8_valid_classes) {
  for (size_t i = 0; i < COUNT(invalid); i++)
    ASSERT_EQ(ephd_ffi_utf8_valid(invalid[i], strlen(invalid[i])),
              EPHD_E_BAD_REQUEST);
  for (size_t i = 0; i < COUNT(valid); i++)
    ASSERT_EQ(ephd_ffi_utf8_valid(valid[i], strlen(valid[i])), EPHD_OK);
  ASSERT_EQ(ephd_ffi_utf8_valid("", 0), EPHD_OK);
  ASSERT_EQ(ephd_ffi_utf8_valid("plain ascii, with a \x01 control", 29),
            EPHD_OK);
  return 0;
}

/* "<pad a's><seq><pad a's>" quoted, so seq sits at `at` bytes from the
 * string's first byte: the walk loads sixteen bytes at a time from there,
 * and each sequence must be judged alike inside a block, across two, and in
 * the byte loop of the tail. */
static size_t quoted(char *text, size_t at, const char *seq, size_t tail) {
  size_t n = 0, len = strlen(seq);
  text[n++] = '"';
  for (size_t i = 0; i < at; i++) text[n++] = 'a';
  memcpy(text + n, seq, len);
  n += len;
  for (size_t i = 0; i < tail; i++) text[n++] = 'a';
  text[n++] = '"';
  return n;
}

TEST_IMPL(utf8_json_strings_at_every_offset) {
  char text[96];
  ephd_buf_t b;
  ephd_buf_init(&b);
  for (size_t at = 0; at < 40; at++) {
    for (size_t tail = 0; tail < 20; tail += 19) {
      for (size_t i = 0; i < COUNT(valid); i++) {
        size_t n = quoted(text, at, valid[i], tail);
        ASSERT(ephd_json_skip(text, text + n) == text + n);
        b.len = 0;
        ASSERT(ephd_json_string(text, text + n, &b) == text + n);
        ASSERT_EQ(b.len, n - 2); /* decoded byte for byte */
        ASSERT(memcmp(b.base, text + 1, n - 2) == 0);
        ASSERT_EQ(ephd_ffi_utf8_valid(text + 1, n - 2), EPHD_OK);
      }
      for (size_t i = 0; i < COUNT(invalid); i++) {
        size_t n = quoted(text, at, invalid[i], tail);
        ASSERT(ephd_json_skip(text, text + n) == NULL);
        b.len = 0;
        ASSERT(ephd_json_string(text, text + n, &b) == NULL);
        ASSERT_EQ(ephd_ffi_utf8_valid(text + 1, n - 2), EPHD_E_BAD_REQUEST);
      }
    }
  }
  ephd_buf_free(&b);
  return 0;
}

/* A sequence cut by the end of the input, not by a quote: the check must
 * not read past the end (ASan sees a read one byte beyond this copy). */
TEST_IMPL(utf8_truncated_at_end_of_input) {
  const char *cut[] = {"\"\xc3", "\"\xe6\x97", "\"\xf0\x9f\x98"};
  for (size_t i = 0; i < COUNT(cut); i++) {
    size_t n = strlen(cut[i]);
    char *copy = malloc(n);
    memcpy(copy, cut[i], n);
    ASSERT(ephd_json_skip(copy, copy + n) == NULL);
    ASSERT_EQ(ephd_ffi_utf8_valid(copy + 1, n - 1), EPHD_E_BAD_REQUEST);
    free(copy);
  }
  return 0;
}

/* Escapes decode to UTF-8 of their own: a pair of surrogate escapes is one
 * four-byte character, and a lone surrogate escape, which would decode to
 * the three bytes RFC 3629 forbids, is refused like the raw bytes are. */
TEST_IMPL(utf8_surrogate_escapes) {
  ephd_buf_t b;
  ephd_buf_init(&b);
  const char *pair = "\"\\ud83d\\ude00\"";
  ASSERT(ephd_json_string(pair, pair + strlen(pair), &b) != NULL);
  ASSERT_MEM_EQ(b.base, b.len, "\xf0\x9f\x98\x80");
  const char *lone[] = {"\"\\ud800\"", "\"\\udfff\"", "\"\\ud83dx\"",
                        "\"\\ud83d\\u0041\"", "\"\\ude00\\ud83d\""};
  for (size_t i = 0; i < COUNT(lone); i++) {
    b.len = 0;
    ASSERT(ephd_json_string(lone[i], lone[i] + strlen(lone[i]), &b) == NULL);
    ASSERT(ephd_json_skip(lone[i], lone[i] + strlen(lone[i])) == NULL);
  }
  ephd_buf_free(&b);
  return 0;
}
