/* Requests own their operation: what a scan hands its commit is the
 * request's alone, whatever other requests are scanned in between (a held
 * configure, a parked pop, the push that wakes it, a relayed request). */
#include "body_request.h"
#include "op.h"
#include "test.h"

static const ephd_span_t *spans(const ephd_request_t *req) {
  return (const ephd_span_t *)ephd_op_of(req)->items.base;
}

TEST_IMPL(op_requests_do_not_share_scans) {
  body_configure();
  const char *a_body =
      "{\"queue\":\"alpha\",\"partition\":\"p\\u0031\","
      "\"messages\":[{\"payload\":1},{\"payload\":\"x\"}]}";
  const char *b_body =
      "{\"queue\":\"beta\",\"group\":\"g\",\"acks\":"
      "[{\"id\":\"e:1:x:2\",\"status\":\"failed\"}]}";
  const char *c_body =
      "{\"queue\":\"gamma\",\"messages\":[{\"payload\":[true]}]}";
  ephd_request_t a = body_request(a_body), b = body_request(b_body),
                 c = body_request(c_body);
  ASSERT(a.op != b.op && b.op != c.op && a.op != c.op);
  /* Scanned in turn, each before the one before it is committed. */
  ASSERT_EQ(ephd_ffi_push_scan(&a), EPHD_OK);
  ASSERT_EQ(ephd_ffi_ack_scan(&b), EPHD_OK);
  ASSERT_EQ(ephd_ffi_push_scan(&c), EPHD_OK);
  /* The first push still has its own names, items and body. */
  const ephd_scan_t *s = &a.op->scan;
  ASSERT_MEM_EQ(s->queue.ptr, s->queue.len, "alpha");
  ASSERT_MEM_EQ(s->partition.ptr, s->partition.len, "p1");
  ASSERT_EQ(s->count, 2);
  ASSERT(ephd_op_of(&a)->scanned == a_body);
  ASSERT_MEM_EQ(a_body + spans(&a)[0].off, spans(&a)[0].len, "1");
  ASSERT_MEM_EQ(a_body + spans(&a)[1].off, spans(&a)[1].len, "\"x\"");
  /* A request answered gives its operation back, and the next one takes
   * it: the ack scanned meanwhile keeps its own. */
  ephd_op_release(&a);
  ASSERT(a.op == NULL);
  ephd_request_t d = body_request("{\"queue\":\"delta\",\"messages\":[]}");
  ASSERT_EQ(ephd_ffi_push_scan(&d), EPHD_OK);
  s = &b.op->scan;
  ASSERT_MEM_EQ(s->queue.ptr, s->queue.len, "beta");
  ASSERT(s->has_group);
  ASSERT_MEM_EQ(s->group.ptr, s->group.len, "g");
  ASSERT_EQ(s->count, 1);
  const ephd_op_state_t *bo = ephd_op_of(&b);
  const ephd_ack_item_t *ack = (const ephd_ack_item_t *)bo->items.base;
  ASSERT_MEM_EQ(bo->names.base + ack->off, ack->len, "e:1:x:2");
  ASSERT_EQ(ack->status, EPHD_ACK_FAILED);
  s = &c.op->scan;
  ASSERT_MEM_EQ(s->queue.ptr, s->queue.len, "gamma");
  ASSERT_MEM_EQ(s->partition.ptr, s->partition.len, "Default");
  ASSERT_MEM_EQ(c_body + spans(&c)[0].off, spans(&c)[0].len, "[true]");
  ephd_op_release(&b);
  ephd_op_release(&c);
  ephd_op_release(&d);
  ephd_op_close();
  return 0;
}

/* A refused body leaves nothing a commit could take. */
TEST_IMPL(op_refused_scan_commits_nothing) {
  body_configure();
  ephd_request_t r =
      body_request("{\"queue\":\"q\",\"messages\":[{\"payload\":1}],\"x\":1}");
  ASSERT_EQ(ephd_ffi_push_scan(&r), EPHD_E_BAD_REQUEST);
  ASSERT(ephd_op_of(&r)->scanned == NULL);
  ASSERT(strstr(r.op->scan.message, "unknown or repeated field \"x\"") != NULL);
  ephd_op_release(&r);
  ephd_op_close();
  return 0;
}

/* An operation that held a large scan gives its memory back when its
 * request is answered, so the free list never pins one big body's spans. */
TEST_IMPL(op_release_gives_back_large_buffers) {
  body_configure();
  ephd_buf_t body;
  ephd_buf_init(&body);
  ephd_buf_appends(&body, "{\"queue\":\"q\",\"messages\":[");
  for (int i = 0; i < 2000; i++)
    ephd_buf_appends(&body, i ? ",{\"payload\":1}" : "{\"payload\":1}");
  ephd_buf_appends(&body, "]}");
  ephd_buf_append(&body, "", 1); /* for strlen */
  ephd_request_t r = body_request(body.base);
  ASSERT_EQ(ephd_ffi_push_scan(&r), EPHD_OK);
  ephd_op_state_t *op = ephd_op_of(&r);
  ASSERT(op->items.cap > 4096);
  ephd_op_release(&r);
  ephd_request_t again = body_request("{}");
  ASSERT(ephd_op_of(&again) == op); /* the free list's most recent */
  ASSERT(op->items.cap <= 4096);
  ephd_op_release(&again);
  ephd_op_close();
  ephd_buf_free(&body);
  return 0;
}
