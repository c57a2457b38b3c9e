#include <stdio.h>

#include "buf.h"
#include "errors.h"
#include "peer_answer.h"
#include "test.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_HEAD 8192
#define MAX_BODY 1024

static size_t read_answer(const char *text, ephd_answer_t *a) {
  return ephd_answer_read_plain(text, strlen(text), MAX_HEAD, MAX_BODY, a);
}

/* An answer as core/http.c writes it (begin, ephd_http_end): the status line
 * with ephd's reason, Content-Type, the Content-Length digits right-aligned
 * in their ten places, the extra headers, the body. */
static void server_answer(ephd_buf_t *o, int status, const char *extra,
                          const char *body) {
  char digits[24];
  snprintf(digits, sizeof(digits), "%10zu", strlen(body));
  ephd_buf_appends(o, "HTTP/1.1 ");
  ephd_buf_append_u64(o, (uint64_t)status);
  ephd_buf_appends(o, " ");
  ephd_buf_appends(o, ephd_status_reason(status));
  ephd_buf_appends(o, "\r\nContent-Type: application/json\r\nContent-Length: ");
  ephd_buf_appends(o, digits);
  ephd_buf_appends(o, "\r\n");
  ephd_buf_appends(o, extra);
  ephd_buf_appends(o, "\r\n");
  ephd_buf_appends(o, body);
}

/* The answers an owner sends the relay most take the fast path: a push's
 * 201, an ack's 200, an owner_moved 503 with its Retry-After and owner,
 * back to back on one connection. */
TEST_IMPL(peer_answer_reads_what_ephd_writes) {
  ephd_buf_t o;
  ephd_buf_init(&o);
  const char *pushed =
      "{\"pushed\":[{\"id\":\"0197a-1\",\"partition\":\"p\"}]}";
  server_answer(&o, 201, "", pushed);
  size_t push_len = o.len;
  server_answer(&o, 200, "", "{\"acked\":1}");
  size_t ack_len = o.len - push_len;
  ephd_buf_t err;
  ephd_buf_init(&err);
  ephd_error_write(&err, EPHD_CODE_OWNER_MOVED, "retry soon");
  ephd_buf_append(&err, "", 1); /* a string for server_answer */
  ASSERT_EQ(ephd_code_status(EPHD_CODE_OWNER_MOVED), 503);
  server_answer(&o, 503,
                "Retry-After: 1\r\nX-Queen-Owner: 00000000000000a2\r\n",
                err.base);
  size_t moved_len = o.len - push_len - ack_len;

  ephd_answer_t a;
  const char *p = o.base;
  ASSERT_EQ(ephd_answer_read_plain(p, o.len, MAX_HEAD, MAX_BODY, &a), push_len);
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(a.keep_alive, 1);
  ASSERT_MEM_EQ(p + a.content_type.off, a.content_type.len, "application/json");
  ASSERT_MEM_EQ(p + a.body.off, a.body.len, pushed);
  ASSERT_EQ(a.retry_after.len, 0);
  ASSERT_EQ(a.owner.len, 0);

  p += push_len;
  ASSERT_EQ(ephd_answer_read_plain(p, o.len - push_len, MAX_HEAD, MAX_BODY, &a),
            ack_len);
  ASSERT_EQ(a.status, 200);
  ASSERT_MEM_EQ(p + a.body.off, a.body.len, "{\"acked\":1}");

  p += ack_len;
  ASSERT_EQ(ephd_answer_read_plain(p, moved_len, MAX_HEAD, MAX_BODY, &a),
            moved_len);
  ASSERT_EQ(a.status, 503);
  ASSERT_MEM_EQ(p + a.retry_after.off, a.retry_after.len, "1");
  ASSERT_MEM_EQ(p + a.owner.off, a.owner.len, "00000000000000a2");
  ASSERT_MEM_EQ(p + a.body.off, a.body.len, err.base);

  /* The answer that closes the connection says so. */
  o.len = 0;
  server_answer(&o, 200, "Connection: close\r\n", "{}");
  ASSERT_EQ(ephd_answer_read_plain(o.base, o.len, MAX_HEAD, MAX_BODY, &a),
            o.len);
  ASSERT_EQ(a.keep_alive, 0);
  ephd_buf_free(&o);
  ephd_buf_free(&err);
  return 0;
}

TEST_IMPL(peer_answer_keeps_the_first_of_each_header) {
  ephd_answer_t a;
  const char *text =
      "HTTP/1.1 503 \r\n"
      "content-type: text/plain \t\r\n"
      "CONTENT-TYPE: application/json\r\n"
      "Retry-After:\r\n"
      "retry-after:  7\r\n"
      "X-Queen-Owner:\t0a\r\n"
      "x-queen-owner: 0b\r\n"
      "Server: other\r\n"
      "Connection: Keep-Alive\r\n"
      "Content-Length: 007\r\n"
      "\r\n"
      "busy!!!";
  ASSERT_EQ(read_answer(text, &a), strlen(text));
  ASSERT_EQ(a.status, 503);
  ASSERT_MEM_EQ(text + a.content_type.off, a.content_type.len, "text/plain");
  /* peer_client keeps the first that is not empty. */
  ASSERT_MEM_EQ(text + a.retry_after.off, a.retry_after.len, "7");
  ASSERT_MEM_EQ(text + a.owner.off, a.owner.len, "0a");
  ASSERT_MEM_EQ(text + a.body.off, a.body.len, "busy!!!");
  ASSERT_EQ(a.keep_alive, 1);

  /* llhttp reads the connection's words in any case, and any reason. */
  const char *closing =
      "HTTP/1.1 200 O\tK \r\nConnection: CLOSE\r\nContent-Length: 0\r\n\r\n";
  ASSERT_EQ(read_answer(closing, &a), strlen(closing));
  ASSERT_EQ(a.keep_alive, 0);
  ASSERT_EQ(a.body.len, 0);

  /* A tab inside a value past the first sixteen bytes is the value's (the
   * sixteen-at-a-time run stops there and the byte loop goes on); the
   * spaces and tabs before its CR are not. */
  const char *tabbed =
      "HTTP/1.1 200 OK\r\n"
      "Content-Type: application/json;\tcharset=utf-8 \t\r\n"
      "Content-Length: 0\r\n\r\n";
  ASSERT_EQ(read_answer(tabbed, &a), strlen(tabbed));
  ASSERT_MEM_EQ(tabbed + a.content_type.off, a.content_type.len,
                "application/json;\tcharset=utf-8");
  return 0;
}

/* Each of these is llhttp's to read (or to refuse). */
TEST_IMPL(peer_answer_leaves_the_rest_to_llhttp) {
  static const char *const not_plain[] = {
      "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\n\r\n", /* runs to the connection's end */
      "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: "
      "0\r\n\r\n",
      "HTTP/1.1 101 Switching\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: 1 \r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: 1025\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n",
      "HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nConnection: close\t\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type : a\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type: a\r\n b\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type: \xc3\xa9\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n",
      "\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
      /* A name is read as printable bytes up to its colon and then checked
       * whole: one that is not a token, its odd byte early or late. */
      "HTTP/1.1 200 OK\r\nX(A): a\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX/A: a\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Quite-Long-Field-Name\": a\r\nContent-Length: "
      "0\r\n\r\n",
      /* A CR folds onto '-' by the 0x20 bit, but never reaches the compare
       * of a known name: it ends the name. */
      "HTTP/1.1 200 OK\r\nContent\rType: a\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent\rLength: 0\r\nContent-Length: 0\r\n\r\n",
      /* A byte outside a value's class past the first sixteen, where the
       * run reads sixteen at a time. */
      "HTTP/1.1 200 OK\r\nContent-Type: application/json;\x01"
      "charset=x\r\n"
      "Content-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type: application/json;\x7f"
      "charset=x\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type: application/json;\x80"
      "charset=x\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type: application/json;\rcharset=x\r\n"
      "Content-Length: 0\r\n\r\n",
      "HTTP/1.1 200 Fine by every measure\x01\r\nContent-Length: 0\r\n\r\n",
  };
  ephd_answer_t a;
  for (size_t i = 0; i < COUNT(not_plain); i++) {
    if (read_answer(not_plain[i], &a) != 0) {
      fprintf(stderr, "plain: %s\n", not_plain[i]);
      return 1;
    }
  }
  /* A NUL in a value or a name, which strlen would hide. */
  static const char nul_value[] =
      "HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 0\r\n\r\n";
  static const char nul_name[] =
      "HTTP/1.1 200 OK\r\nX\0A: a\r\nContent-Length: 0\r\n\r\n";
  ASSERT_EQ(ephd_answer_read_plain(nul_value, sizeof(nul_value) - 1, MAX_HEAD,
                                   MAX_BODY, &a),
            0);
  ASSERT_EQ(ephd_answer_read_plain(nul_name, sizeof(nul_name) - 1, MAX_HEAD,
                                   MAX_BODY, &a),
            0);
  /* Whole only with its last byte, and within its bounds. */
  const char *whole =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}";
  size_t len = strlen(whole), head = len - 2;
  for (size_t n = 0; n < len; n++)
    ASSERT_EQ(ephd_answer_read_plain(whole, n, MAX_HEAD, MAX_BODY, &a), 0);
  ASSERT_EQ(ephd_answer_read_plain(whole, len, head, 2, &a), len);
  ASSERT_EQ(ephd_answer_read_plain(whole, len, head - 1, 2, &a), 0);
  ASSERT_EQ(ephd_answer_read_plain(whole, len, head, 1, &a), 0);
  return 0;
}
