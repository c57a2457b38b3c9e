/* The scan's frame (core/scan.h): what an edge writes of its scan, its
 * owner reads back as the same scan, and nothing that is not a frame is
 * read as one. */
#include <stdio.h>

#include "body_request.h"
#include "op.h"
#include "scan.h"
#include "test.h"

/* The frame's value: its header line without the name and the CRLF. */
static ephd_slice_t value_of(const char *line, size_t len) {
  size_t name = sizeof(EPHD_FRAME_NAME) - 1;
  ephd_slice_t v = {line + name, len - name - 2};
  return v;
}

static int same_slice(ephd_slice_t a, ephd_slice_t b) {
  return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* Scanned at an edge, framed, and read from the frame at an owner: every
 * result the commit and Lua read is the scan's. */
static int framed_as_scanned(const char *body) {
  ephd_request_t edge = body_request(body), owner = body_request(body);
  ASSERT_EQ(ephd_ffi_push_scan(&edge), EPHD_OK);
  char line[EPHD_FRAME_LINE_MAX];
  size_t n = ephd_scan_frame(&edge, line);
  ASSERT(n > 0);
  ASSERT(line[n - 2] == '\r' && line[n - 1] == '\n');
  ephd_op_of(&owner)->frame = value_of(line, n);
  ASSERT_EQ(ephd_ffi_push_scan(&owner), EPHD_OK);
  const ephd_scan_t *s = &edge.op->scan, *f = &owner.op->scan;
  ASSERT_EQ(f->count, s->count);
  ASSERT_EQ(f->bytes, s->bytes);
  ASSERT_EQ(f->has_queue, s->has_queue);
  ASSERT_EQ(f->has_partition, s->has_partition);
  ASSERT_EQ(f->names_clean, s->names_clean);
  ASSERT(same_slice(f->queue, s->queue));
  ASSERT(same_slice(f->partition, s->partition));
  ASSERT(ephd_op_of(&owner)->scanned == owner.body.ptr);
  /* Whatever the operation held before (the free list hands one back as
   * it was), the frame read frames again as the scan did. */
  char again[EPHD_FRAME_LINE_MAX];
  ASSERT_EQ(ephd_scan_frame(&owner, again), n);
  ASSERT(memcmp(again, line, n) == 0);
  ASSERT_EQ(ephd_op_of(&owner)->items.len, ephd_op_of(&edge)->items.len);
  ASSERT(memcmp(ephd_op_of(&owner)->items.base, ephd_op_of(&edge)->items.base,
                ephd_op_of(&edge)->items.len) == 0);
  ephd_op_release(&edge);
  ephd_op_release(&owner);
  return 0;
}

TEST_IMPL(scan_frame_reads_as_the_scan_found) {
  body_configure();
  const char *bodies[] = {
      "{\"queue\":\"single\",\"partition\":\"p-1\","
      "\"messages\":[{\"payload\":\"xxxxxxxxxxxxxx\"}]}",
      "{\"queue\":\"q\",\"messages\":[{\"payload\":1}]}", /* Default */
      " { \"messages\" : [ { \"payload\" : { \"a\" : [1, \"\\u00e9\"] } } ] ,"
      " \"partition\" : \"caf\xc3\xa9\" , \"queue\" : \"q q\" } ",
      "{\"queue\":\"q\",\"partition\":\"\xc2\xa0x\",\"messages\":"
      "[{\"payload\":null},{\"payload\":true},{\"payload\":\"\\\"\"}]}",
  };
  for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
    if (framed_as_scanned(bodies[i]) != 0) return 1;
  /* As many messages as a frame holds, at offsets of several digits. */
  char body[4096];
  int at =
      snprintf(body, sizeof(body), "{\"queue\":\"%0500d\",\"messages\":[", 7);
  for (int i = 0; i < EPHD_FRAME_MAX; i++)
    at += snprintf(body + at, sizeof(body) - (size_t)at, "%s{\"payload\":%d}",
                   i ? "," : "", i * 1000);
  snprintf(body + at, sizeof(body) - (size_t)at, "]}");
  return framed_as_scanned(body);
}

/* A push the owner must scan itself gets no frame. */
TEST_IMPL(scan_frame_none_when_the_owner_must_scan) {
  body_configure();
  char many[2048];
  int at = snprintf(many, sizeof(many), "{\"queue\":\"q\",\"messages\":[");
  for (int i = 0; i <= EPHD_FRAME_MAX; i++)
    at += snprintf(many + at, sizeof(many) - (size_t)at, "%s{\"payload\":1}",
                   i ? "," : "");
  snprintf(many + at, sizeof(many) - (size_t)at, "]}");
  const char *bodies[] = {
      many, /* more messages than a frame holds */
      "{\"queue\":\"q\",\"messages\":[]}",
      "{\"queue\":\"\\u0071\",\"messages\":[{\"payload\":1}]}", /* escaped */
      "{\"queue\":\"q\",\"partition\":\"a\\/"
      "b\",\"messages\":[{\"payload\":1}]}",
      "{\"queue\":\"q\\n\",\"messages\":[{\"payload\":1}]}", /* not clean */
      "{\"queue\":\"\",\"messages\":[{\"payload\":1}]}",
      "{\"queue\":\"q\",\"messages\":[{\"payload\":1}]", /* refused */
  };
  for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
    ephd_request_t req = body_request(bodies[i]);
    ephd_ffi_push_scan(&req);
    char line[EPHD_FRAME_LINE_MAX];
    ASSERT_EQ(ephd_scan_frame(&req, line), 0);
    ephd_op_release(&req);
  }
  return 0;
}

/* What is not a frame of this body is refused whole (the frame is read
 * alone: the body need not be JSON), and the push is scanned as any
 * other. */
TEST_IMPL(scan_frame_refuses_what_is_not_one) {
  body_configure();
  /* queue at 10:1, partition at 26:3, the payload at 54:3, 60 bytes */
  const char *body =
      "{\"queue\":\"q\",\"partition\":\"p\x01x\",\"messages\":[{\"payload\":"
      "123}]}";
  const char *frames[] = {
      "",
      "10:1",
      "10:1 -",
      "10:1 - ",
      "10:1 - 54:3,",
      "10:1 - 54:3 ",
      "10:1  - 54:3",
      "10:1 - 54:7",           /* past the body */
      "10:1 - 4294967295:2",   /* past it, by an overflow */
      "10:1 - 52:00000000003", /* eleven digits */
      "10:1 - 52:+3",
      "10:1 - 52;3",
      "10:0 - 54:3",    /* no queue */
      "10:1 26:3 54:3", /* a control byte in the partition */
      "60:1 - 54:3",    /* a name that is a lone 0xC2 */
      "10:1 -- 54:3",
      "10:1 - 54:3,54:3,54:3,54:3,54:3,54:3,54:3,54:3,54:3,54:3,54:3,54:3,"
      "54:3,54:3,54:3,54:3,54:3", /* one message too many */
  };
  char with_c2[128];
  snprintf(with_c2, sizeof(with_c2), "%s\xc2", body);
  for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++) {
    ephd_request_t req = body_request(i == 14 ? with_c2 : body);
    ephd_slice_t frame = {frames[i], strlen(frames[i])};
    ASSERT_EQ(ephd_scan_frame_read(&req, frame), EPHD_E_BAD_REQUEST);
    ASSERT(ephd_op_of(&req)->scanned == NULL);
    ASSERT_EQ(ephd_op_of(&req)->items.len, 0);
    ephd_op_release(&req);
  }
  /* The frame refused, the body is scanned as any other. */
  const char *valid =
      "{\"queue\":\"q\",\"partition\":\"p\",\"messages\":[{\"payload\":"
      "123}]}";
  ephd_request_t req = body_request(valid);
  ephd_op_of(&req)->frame = (ephd_slice_t){"10:1 - 52:99", 12};
  ASSERT_EQ(ephd_ffi_push_scan(&req), EPHD_OK);
  ASSERT_EQ(req.op->scan.count, 1);
  ASSERT_EQ(req.op->scan.bytes, 3);
  ASSERT_MEM_EQ(req.op->scan.partition.ptr, req.op->scan.partition.len, "p");
  ephd_op_release(&req);
  /* And a frame that is one is believed over the body, which names a
   * partition the frame does not: 52:3 is the payload 123. */
  req = body_request(valid);
  ephd_op_of(&req)->frame = (ephd_slice_t){"10:1 - 52:3", 11};
  ASSERT_EQ(ephd_ffi_push_scan(&req), EPHD_OK);
  ASSERT_EQ(req.op->scan.count, 1);
  ASSERT_EQ(req.op->scan.bytes, 3);
  ASSERT_EQ(req.op->scan.has_partition, 0);
  ASSERT_MEM_EQ(req.op->scan.partition.ptr, req.op->scan.partition.len,
                "Default");
  ephd_op_release(&req);
  return 0;
}
