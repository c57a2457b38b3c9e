#include <inttypes.h>
#include <stdlib.h>

#include "buf.h"
#include "errors.h"
#include "ffi.h"
#include "id.h"
#include "json.h"
#include "map.h"
#include "prom.h"
#include "test.h"
#include "uuid.h"

TEST_IMPL(map_put_get_del) {
  ephd_map_t m;
  ephd_map_init(&m);
  static char keys[1000][8];
  for (int i = 0; i < 1000; i++) {
    snprintf(keys[i], 8, "k%d", i);
    ephd_map_put(&m, keys[i], strlen(keys[i]), keys[i]);
  }
  ASSERT_EQ(m.count, 1000);
  for (int i = 0; i < 1000; i++)
    ASSERT(ephd_map_get(&m, keys[i], strlen(keys[i])) == keys[i]);
  ASSERT(ephd_map_get(&m, "nope", 4) == NULL);
  for (int i = 0; i < 1000; i += 2)
    ASSERT(ephd_map_del(&m, keys[i], strlen(keys[i])) == keys[i]);
  for (int i = 0; i < 1000; i++)
    ASSERT((ephd_map_get(&m, keys[i], strlen(keys[i])) != NULL) == (i % 2));
  for (int i = 1; i < 1000; i += 2) ephd_map_del(&m, keys[i], strlen(keys[i]));
  ASSERT_EQ(m.count, 0);
  ASSERT(m.slots == NULL); /* an emptied map gives its memory back */
  return 0;
}

TEST_IMPL(map_delete_keeps_probe_chains) {
  /* Keys that collide in a small table: deleting one in the middle of a
   * probe run must leave the others reachable. */
  ephd_map_t m;
  ephd_map_init(&m);
  uint64_t keys[64];
  for (int i = 0; i < 64; i++) {
    keys[i] = (uint64_t)i * 8;
    ephd_map_put(&m, (const char *)&keys[i], 8, &keys[i]);
  }
  for (int i = 0; i < 64; i += 3) ephd_map_del(&m, (const char *)&keys[i], 8);
  for (int i = 0; i < 64; i++) {
    void *v = ephd_map_get(&m, (const char *)&keys[i], 8);
    ASSERT((v != NULL) == (i % 3 != 0));
  }
  size_t pos = 0, seen = 0;
  while (ephd_map_next(&m, &pos)) seen++;
  ASSERT_EQ(seen, m.count);
  ephd_map_free(&m);
  return 0;
}

/* A cursor's lease map kept the 16,384-slot table of its busiest moment
 * for the one lease left: tables halve as they empty, and every entry stays
 * reachable through each shrink. */
TEST_IMPL(map_shrinks_when_sparse) {
  ephd_map_t m;
  ephd_map_init(&m);
  static uint64_t keys[10000];
  for (int i = 0; i < 10000; i++) {
    keys[i] = (uint64_t)i;
    ephd_map_put(&m, (const char *)&keys[i], 8, &keys[i]);
  }
  ASSERT_EQ(m.mask + 1, 16384);
  for (int i = 0; i < 9999; i++) {
    ASSERT(ephd_map_del(&m, (const char *)&keys[i], 8) == &keys[i]);
    /* Never sparser than an eighth, above the smallest table. */
    ASSERT(m.mask + 1 == 8 || m.count * 8 >= m.mask + 1);
    if (i % 997 == 0)
      for (int j = i + 1; j < 10000; j++)
        ASSERT(ephd_map_get(&m, (const char *)&keys[j], 8) == &keys[j]);
  }
  ASSERT_EQ(m.count, 1);
  ASSERT_EQ(m.mask + 1, 8);
  ASSERT(ephd_map_get(&m, (const char *)&keys[9999], 8) == &keys[9999]);
  /* It grows again from there as it did the first time. */
  for (int i = 0; i < 9999; i++)
    ephd_map_put(&m, (const char *)&keys[i], 8, &keys[i]);
  ASSERT_EQ(m.mask + 1, 16384);
  for (int i = 0; i < 10000; i++)
    ASSERT(ephd_map_get(&m, (const char *)&keys[i], 8) == &keys[i]);
  ephd_map_free(&m);
  return 0;
}

static int skips(const char *s) {
  const char *end = s + strlen(s);
  const char *p = ephd_json_skip(s, end);
  return p != NULL && ephd_json_ws(p, end) == end;
}

TEST_IMPL(json_skip_accepts_json) {
  ASSERT(skips("{\"b\":1,\"a\":[1.0,12345678901234567890,\"\\u00e9\"]}"));
  ASSERT(skips("  [ ] "));
  ASSERT(skips("{}"));
  ASSERT(skips("-0.5e+10"));
  ASSERT(skips("\"\\ud83d\\ude00\""));
  ASSERT(skips("[true,false,null,{\"x\":[{}]}]"));
  return 0;
}

TEST_IMPL(json_skip_refuses_broken) {
  ASSERT(!skips("{"));
  ASSERT(!skips("[1,]"));
  ASSERT(!skips("{\"a\"}"));
  ASSERT(!skips("01"));
  ASSERT(!skips("1."));
  ASSERT(!skips("tru"));
  ASSERT(!skips("\"a\nb\""));
  ASSERT(!skips("\"\\x\""));
  ASSERT(!skips("\"\\ud83d\""));
  ASSERT(!skips("{\"a\":1,}"));
  ASSERT(!skips("[1 2]"));
  char deep[EPHD_JSON_MAX_DEPTH + 2];
  memset(deep, '[', sizeof(deep) - 1);
  deep[sizeof(deep) - 1] = 0;
  ASSERT(!skips(deep));
  return 0;
}

/* Plain runs are walked sixteen bytes at a time: a stop byte (quote,
 * backslash, control) must be found at every offset within and across
 * blocks, and UTF-8 beside it must neither stop the run nor hide it. A stop
 * that cuts a character in two leaves a truncated sequence before it, which
 * is refused as not UTF-8. */
static long broken_at(const char *s) {
  /* A copy of its own size, so a read past the end is the sanitizer's. */
  size_t len = strlen(s);
  char *copy = malloc(len ? len : 1);
  if (copy == NULL) abort();
  memcpy(copy, s, len);
  const char *at = ephd_json_broken(copy, copy + len);
  long where = at == NULL ? -1 : (long)(at - copy);
  free(copy);
  return where;
}

/* Where a body stops being JSON, for the 400's "at byte N". */
TEST_IMPL(json_broken_names_the_byte) {
  ASSERT_EQ(broken_at(" {\"a\":[1,2]} "), -1);
  ASSERT_EQ(broken_at("{\"m\":[{\"payload\":1}"), 19); /* cut short */
  ASSERT_EQ(broken_at("{\"m\":[1 2]}"), 8);            /* no comma */
  ASSERT_EQ(broken_at("{\"m\":[tru]}"), 6);            /* the token */
  /* A token that runs into the end is cut short, not broken where it
   * starts: a payload string, an escape, a literal, a number, a name. */
  ASSERT_EQ(broken_at("{\"m\":[\"abc"), 10);
  ASSERT_EQ(broken_at("{\"m\":[\"a\\"), 9);
  ASSERT_EQ(broken_at("{\"m\":[\"\\u00"), 11);
  ASSERT_EQ(broken_at("{\"m\":[\"\\ud800"), 13);
  ASSERT_EQ(broken_at("{\"m\":[\"\xc3"), 8);
  ASSERT_EQ(broken_at("{\"m\":[tru"), 9);
  ASSERT_EQ(broken_at("{\"m\":[1.5e"), 10);
  ASSERT_EQ(broken_at("{\"m\":[1,{\"pay"), 13);
  /* ...while one broken before the end is named where it starts. */
  ASSERT_EQ(broken_at("{\"m\":[\"a\\q"), 6);
  ASSERT_EQ(broken_at("{\"m\":[\"a\x01"), 6);
  ASSERT_EQ(broken_at("{\"m\":[trux"), 6);
  ASSERT_EQ(broken_at("{\"m\":1,}"), 7);  /* no name */
  ASSERT_EQ(broken_at("{\"m\":1} x"), 8); /* after it */
  ASSERT_EQ(broken_at(""), 0);
  /* Cut where a name or a value would start: nothing left to read. */
  ASSERT_EQ(broken_at("{"), 1);
  ASSERT_EQ(broken_at("{\"m\":"), 5);
  ASSERT_EQ(broken_at("[1,"), 3);
  return 0;
}

TEST_IMPL(json_string_stops_at_every_offset) {
  const char stops[] = {'"', '\\', '\x01', '\x1f'};
  for (size_t len = 0; len < 40; len++) {
    for (size_t s = 0; s < sizeof(stops); s++) {
      for (size_t at = 0; at < len; at++) {
        char text[48];
        text[0] = '"';
        for (size_t i = 0; i < len; i++)
          text[1 + i] = i % 3 == 1 ? '\xc3' : i % 3 == 2 ? '\xa9' : 'a';
        text[1 + at] = stops[s];
        text[1 + len] = '"';
        const char *end = text + len + 2, *p = ephd_json_skip(text, end);
        if (stops[s] == '"' && ephd_ffi_utf8_valid(text + 1, at) == EPHD_OK) {
          ASSERT(p == text + at + 2); /* the string ends at the early quote */
        } else {
          /* a raw control byte; \a, \<UTF-8 byte> or \" then no closing
           * quote; or a character cut by the stop */
          ASSERT(p == NULL);
        }
      }
    }
    char plain[48];
    plain[0] = '"';
    for (size_t i = 0; i < len; i++)
      plain[1 + i] = i + 1 == len && i % 2 == 0 ? 'a' : i % 2 ? '\xa9' : '\xc3';
    plain[1 + len] = '"';
    ASSERT(ephd_json_skip(plain, plain + len + 2) == plain + len + 2);
  }
  return 0;
}

TEST_IMPL(json_string_decodes_escapes) {
  ephd_buf_t b;
  ephd_buf_init(&b);
  const char *s = "\"a\\\"b\\u00e9\\ud83d\\ude00\\n\"";
  const char *p = ephd_json_string(s, s + strlen(s), &b);
  ASSERT(p == s + strlen(s));
  ASSERT_MEM_EQ(b.base, b.len, "a\"b\xc3\xa9\xf0\x9f\x98\x80\n");
  ephd_buf_free(&b);
  return 0;
}

TEST_IMPL(json_write_escapes) {
  ephd_buf_t b;
  ephd_buf_init(&b);
  ephd_json_write_string(&b, "q\"\\\x01\n", 5);
  ASSERT_MEM_EQ(b.base, b.len, "\"q\\\"\\\\\\u0001\\n\"");
  /* Plain runs go eight bytes a step: escapes inside and across words,
   * and bytes of 0x80 up (UTF-8) passed as they are. */
  b.len = 0;
  static const char mixed[] = "abcdefgh\"jklmnop\x1fr\xc3\xa9stuvwxyz\\";
  ephd_json_write_escaped(&b, mixed, sizeof(mixed) - 1);
  ASSERT_MEM_EQ(b.base, b.len,
                "abcdefgh\\\"jklmnop\\u001fr\xc3\xa9stuvwxyz\\\\");
  ephd_buf_free(&b);
  return 0;
}

TEST_IMPL(json_field_finds_members) {
  ephd_slice_t v;
  const char *j = "{\"\":1, \"a\" : [1,2] ,\"b\":{}}";
  ASSERT_EQ(ephd_ffi_json_field(j, strlen(j), "a", &v), EPHD_OK);
  ASSERT_MEM_EQ(v.ptr, v.len, "[1,2]");
  /* An empty key (found by fuzzing: memcmp saw its NULL buffer). */
  ASSERT_EQ(ephd_ffi_json_field(j, strlen(j), "", &v), EPHD_OK);
  ASSERT_MEM_EQ(v.ptr, v.len, "1");
  ASSERT_EQ(ephd_ffi_json_field(j, strlen(j), "c", &v), EPHD_E_NOT_FOUND);
  ASSERT_EQ(ephd_ffi_json_field("[1]", 3, "a", &v), EPHD_E_BAD_REQUEST);
  ASSERT_EQ(ephd_ffi_json_field("{\"a\":", 5, "a", &v), EPHD_E_BAD_REQUEST);
  /* Repeated, the last one is the value, as lua-cjson takes it... */
  const char *twice = "{\"a\":1,\"b\":2,\"a\":3}";
  ASSERT_EQ(ephd_ffi_json_field(twice, strlen(twice), "a", &v), EPHD_OK);
  ASSERT_MEM_EQ(v.ptr, v.len, "3");
  /* ...and the members are counted each time, so Lua can tell. */
  ASSERT_EQ(ephd_ffi_json_members(twice, strlen(twice)), 3);
  ASSERT_EQ(ephd_ffi_json_members(j, strlen(j)), 3);
  ASSERT_EQ(ephd_ffi_json_members(" {} ", 4), 0);
  ASSERT_EQ(ephd_ffi_json_members("[1]", 3), EPHD_E_BAD_REQUEST);
  return 0;
}

TEST_IMPL(id_round_trip) {
  ephd_buf_t b;
  ephd_buf_init(&b);
  ephd_id_write(&b, 0x9f3a1c, "room-7", 6, 41);
  ASSERT_MEM_EQ(b.base, b.len, "e:009f3a1c:room-7:41");
  ephd_id_t id;
  ASSERT_EQ(ephd_id_parse(b.base, b.len, &id), 0);
  ASSERT_EQ(id.epoch, 0x9f3a1c);
  ASSERT_EQ(id.seq, 41);
  ASSERT_MEM_EQ(id.partition, id.partition_len, "room-7");
  ephd_buf_free(&b);
  return 0;
}

TEST_IMPL(id_partition_with_colons) {
  ephd_id_t id;
  const char *s = "e:1:a:b:c:7";
  ASSERT_EQ(ephd_id_parse(s, strlen(s), &id), 0);
  ASSERT_MEM_EQ(id.partition, id.partition_len, "a:b:c");
  ASSERT_EQ(id.seq, 7);
  return 0;
}

TEST_IMPL(id_refuses_malformed) {
  const char *bad[] = {"",
                       "e:",
                       "x:1:p:1",
                       "e:1:p:",
                       "e::p:1",
                       "e:1p:1",
                       "e:zz:p:1",
                       "e:1:p:1a",
                       "e:123456789:p:1",
                       "e:1:p:99999999999999999999"};
  ephd_id_t id;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ASSERT_EQ(ephd_id_parse(bad[i], strlen(bad[i]), &id), -1);
  return 0;
}

TEST_IMPL(url_decode) {
  char out[32];
  ASSERT_EQ(ephd_ffi_url_decode("a%20b%2Fc", 9, out, 0), 5);
  ASSERT_MEM_EQ(out, 5, "a b/c");
  ASSERT_EQ(ephd_ffi_url_decode("a+b", 3, out, 1), 3);
  ASSERT_MEM_EQ(out, 3, "a b");
  ASSERT_EQ(ephd_ffi_url_decode("a+b", 3, out, 0), 3);
  ASSERT_MEM_EQ(out, 3, "a+b");
  ASSERT_EQ(ephd_ffi_url_decode("%2541", 5, out, 0), 3); /* once, not twice */
  ASSERT_MEM_EQ(out, 3, "%41");
  ASSERT_EQ(ephd_ffi_url_decode("%", 1, out, 0), EPHD_E_BAD_REQUEST);
  ASSERT_EQ(ephd_ffi_url_decode("%4", 2, out, 0), EPHD_E_BAD_REQUEST);
  ASSERT_EQ(ephd_ffi_url_decode("%zz", 3, out, 0), EPHD_E_BAD_REQUEST);
  return 0;
}

TEST_IMPL(errors_write_bodies) {
  ephd_buf_t b;
  ephd_buf_init(&b);
  ephd_error_write(&b, EPHD_CODE_QUEUE_FULL, "a \"quoted\" why");
  ASSERT_MEM_EQ(b.base, b.len,
                "{\"error\":\"a \\\"quoted\\\" why\",\"code\":\"queue_full\"}");
  ephd_buf_free(&b);
  ASSERT_EQ(ephd_code_status(EPHD_CODE_EPHEMERAL_CONFIGURE_FAILED), 500);
  ASSERT_MEM_EQ(ephd_code_name(EPHD_CODE_ROUTE_NOT_FOUND),
                strlen(ephd_code_name(EPHD_CODE_ROUTE_NOT_FOUND)),
                "route_not_found");
  return 0;
}

TEST_IMPL(errors_statuses) {
  ASSERT_MEM_EQ(ephd_status_reason(431), strlen(ephd_status_reason(431)),
                "Request Header Fields Too Large");
  ASSERT_MEM_EQ(ephd_status_reason(418), 7, "Unknown");
  ASSERT_EQ(ephd_status_at(ephd_status_index(503)), 503);
  ASSERT_EQ(ephd_status_index(418), EPHD_STATUS_COUNT);
  /* Every code's status is one the status line and /metrics know. */
  for (int c = 0; c < EPHD_CODE_COUNT; c++)
    ASSERT(ephd_status_index(ephd_code_status((ephd_code_t)c)) <
           EPHD_STATUS_COUNT);
  return 0;
}

/* Label values that are data (a policy's name, a queue's) are escaped as
 * the text format says; a whole number is written as one. */
TEST_IMPL(prom_sample_of_escapes_labels) {
  ephd_buf_t b;
  ephd_buf_init(&b);
  static const char *const keys[] = {"a", "b"};
  ephd_slice_t values[2] = {{"x\"y\\z\nw", 7}, {"plain", 5}};
  ephd_prom_sample_of(&b, "m", keys, values, 2, 1.25);
  ephd_prom_sample_of(&b, "n", keys, values, 0, 9007199254740992.0);
  ASSERT_MEM_EQ(b.base, b.len,
                "m{a=\"x\\\"y\\\\z\\nw\",b=\"plain\"} 1.25\n"
                "n 9007199254740992\n");
  ephd_buf_free(&b);
  return 0;
}

TEST_IMPL(uuid_lowered_and_canonical) {
  char out[EPHD_UUID_LEN];
  const char *mixed = "0A1b2C3d-4E5f-6789-aBcD-EF0123456789";
  ASSERT_EQ(ephd_ffi_uuid_lower(mixed, strlen(mixed), out), EPHD_OK);
  ASSERT_MEM_EQ(out, sizeof(out), "0a1b2c3d-4e5f-6789-abcd-ef0123456789");
  ASSERT(ephd_uuid_canonical(out, sizeof(out)));
  ASSERT(!ephd_uuid_canonical(mixed, strlen(mixed)));
  const char *bad[] = {"0a1b2c3d-4e5f-6789-abcd-ef012345678",   /* short */
                       "0a1b2c3d-4e5f-6789-abcd-ef01234567890", /* long */
                       "0a1b2c3d_4e5f-6789-abcd-ef0123456789",  /* a dash */
                       "0a1b2c3d-4e5f-6789-abcd-ef012345678g",  /* not hex */
                       "0a1b2c3d4-e5f-6789-abcd-ef0123456789"}; /* moved */
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_EQ(ephd_ffi_uuid_lower(bad[i], strlen(bad[i]), out),
              EPHD_E_BAD_REQUEST);
    ASSERT(!ephd_uuid_canonical(bad[i], strlen(bad[i])));
  }
  /* Every byte value at every place: a dash where the dashes go, a digit
   * or a lowercase hex letter everywhere else. */
  for (size_t i = 0; i < EPHD_UUID_LEN; i++) {
    int dash = i == 8 || i == 13 || i == 18 || i == 23;
    for (int b = 0; b < 256; b++) {
      char one[EPHD_UUID_LEN];
      memcpy(one, out, sizeof(one));
      one[i] = (char)b;
      int hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
      ASSERT_EQ(ephd_uuid_canonical(one, sizeof(one)), dash ? b == '-' : hex);
    }
  }
  return 0;
}

TEST_IMPL(u64_format_writes_every_width) {
  uint64_t v[] = {0,   9,     10,    99,          100,
                  101, 12345, 99999, 4294967295u, UINT64_MAX};
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    char got[EPHD_U64_DIGITS + 1], want[32];
    size_t n = ephd_u64_format(got, v[i]);
    ASSERT_EQ(n, (size_t)snprintf(want, sizeof(want), "%" PRIu64, v[i]));
    ASSERT(memcmp(got, want, n) == 0);
  }
  /* Every power of ten and its neighbours, where the width changes. */
  for (uint64_t p = 1; p <= UINT64_MAX / 10; p *= 10)
    for (uint64_t d = p - 1; d <= p + 1; d++) {
      char got[EPHD_U64_DIGITS + 1], want[32];
      size_t n = ephd_u64_format(got, d);
      ASSERT_EQ(n, (size_t)snprintf(want, sizeof(want), "%" PRIu64, d));
      ASSERT(memcmp(got, want, n) == 0);
    }
  return 0;
}
