#include "http_head.h"
#include "test.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_HEAD 8192
#define MAX_BODY 1024

static size_t read_plain(const char *text, ephd_plain_t *m) {
  return ephd_head_read_plain(text, strlen(text), MAX_HEAD, MAX_BODY, m);
}

TEST_IMPL(plain_reads_common_requests) {
  ephd_plain_t m;
  const char *push =
      "POST /api/v1/ephemeral/push HTTP/1.1\r\n"
      "host: bench\r\n"
      "Content-Type: application/json \t\r\n"
      "User-Agent: curl/8.0\r\n"
      "Connection: Keep-Alive\r\n"
      "X-QUEEN-TENANT:acme\r\n"
      "Content-Length: 4\r\n"
      "\r\n"
      "{}  GET /next HTTP/1.1\r\n\r\n";
  size_t n = read_plain(push, &m);
  ASSERT_EQ(n, strlen(push) - strlen("GET /next HTTP/1.1\r\n\r\n"));
  ASSERT(strcmp(m.method, "POST") == 0);
  ASSERT_MEM_EQ(push + m.url.off, m.url.len, "/api/v1/ephemeral/push");
  ASSERT_MEM_EQ(push + m.body.off, m.body.len, "{}  ");
  ASSERT_EQ(m.seen, (1u << EPHD_HDR_HOST) | (1u << EPHD_HDR_CONTENT_TYPE) |
                        (1u << EPHD_HDR_TENANT));
  ephd_head_span_t *h = m.headers;
  ASSERT_MEM_EQ(push + h[EPHD_HDR_HOST].off, h[EPHD_HDR_HOST].len, "bench");
  ASSERT_MEM_EQ(push + h[EPHD_HDR_CONTENT_TYPE].off,
                h[EPHD_HDR_CONTENT_TYPE].len, "application/json");
  ASSERT_MEM_EQ(push + h[EPHD_HDR_TENANT].off, h[EPHD_HDR_TENANT].len, "acme");

  /* The next message of a pipeline is read from where the first ended. */
  const char *next = push + n;
  ASSERT_EQ(read_plain(next, &m), strlen(next));
  ASSERT(strcmp(m.method, "GET") == 0);
  ASSERT_EQ(m.body.len, 0);
  ASSERT_EQ(m.seen, 0);

  const char *get =
      "GET /api/v1/ephemeral/queues?limit=5&q=a%20b HTTP/1.1\r\n"
      "Authorization: Bearer t0k3n\r\nHost:\r\n\r\n";
  ASSERT_EQ(read_plain(get, &m), strlen(get));
  ASSERT_MEM_EQ(get + m.url.off, m.url.len,
                "/api/v1/ephemeral/queues?limit=5&q=a%20b");
  ASSERT_MEM_EQ(get + m.headers[EPHD_HDR_AUTHORIZATION].off,
                m.headers[EPHD_HDR_AUTHORIZATION].len, "Bearer t0k3n");
  ASSERT_EQ(m.headers[EPHD_HDR_HOST].len, 0); /* an empty value */

  ASSERT(read_plain("DELETE /q HTTP/1.1\r\n\r\n", &m) > 0);
  ASSERT(strcmp(m.method, "DELETE") == 0);
  ASSERT(read_plain("PUT /q HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &m) > 0);
  ASSERT(strcmp(m.method, "PUT") == 0);
  ASSERT_EQ(m.keep_alive, 1);
  return 0;
}

/* A push as each client people use sends it (captured from the clients
 * themselves, with a two-byte body): all of them are plain, which is the
 * reason the plain reader exists. Node's http module is here with the
 * Content-Length it sets when given one; without, it sends chunked, which
 * is llhttp's. */
static const char *const client_pushes[] = {
    /* curl 7.88 */
    "Host: 127.0.0.1:6632\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n"
    "Content-Type: application/json\r\nContent-Length: 2\r\n",
    /* Python http.client */
    "Host: 127.0.0.1:6632\r\nAccept-Encoding: identity\r\n"
    "Content-Length: 2\r\nContent-Type: application/json\r\n",
    /* Python requests 2.34 */
    "Host: 127.0.0.1:6632\r\nUser-Agent: python-requests/2.34.2\r\n"
    "Accept-Encoding: gzip, deflate\r\nAccept: */*\r\n"
    "Connection: keep-alive\r\nContent-Type: application/json\r\n"
    "Content-Length: 2\r\n",
    /* Node 20 fetch (undici) */
    "host: 127.0.0.1:6632\r\nconnection: keep-alive\r\n"
    "Content-Type: application/json\r\naccept: */*\r\n"
    "accept-language: *\r\nsec-fetch-mode: cors\r\nuser-agent: node\r\n"
    "accept-encoding: gzip, deflate\r\ncontent-length: 2\r\n",
    /* Node 20 http module, Content-Length given */
    "Content-Type: application/json\r\nContent-Length: 2\r\n"
    "Host: 127.0.0.1:6632\r\nConnection: keep-alive\r\n",
    /* wget 1.21 */
    "Host: 127.0.0.1:6632\r\nUser-Agent: Wget/1.21.3\r\nAccept: */*\r\n"
    "Accept-Encoding: identity\r\nConnection: Keep-Alive\r\n"
    "Content-Type: application/json\r\nContent-Length: 2\r\n",
    /* ephd.client */
    "Host: 127.0.0.1:6632\r\nContent-Type: application/json\r\n"
    "Content-Length: 2\r\n",
};

TEST_IMPL(plain_reads_what_clients_send) {
  ephd_plain_t m;
  char push[512];
  for (size_t i = 0; i < COUNT(client_pushes); i++) {
    snprintf(push, sizeof(push),
             "POST /api/v1/ephemeral/push HTTP/1.1\r\n%s\r\n{}",
             client_pushes[i]);
    if (read_plain(push, &m) != strlen(push) || !m.keep_alive) {
      fprintf(stderr, "not read as a kept plain push: \"%s\"\n", push);
      return 1;
    }
    ASSERT_MEM_EQ(push + m.body.off, m.body.len, "{}");
  }
  return 0;
}

/* urllib sends "Connection: close" with every request: plain, and the
 * connection is not kept, as llhttp_should_keep_alive says. */
TEST_IMPL(plain_reads_connection_close) {
  ephd_plain_t m;
  const char *urllib =
      "POST /api/v1/ephemeral/push HTTP/1.1\r\n"
      "Accept-Encoding: identity\r\n"
      "Content-Length: 2\r\n"
      "Host: 127.0.0.1:6632\r\n"
      "User-Agent: Python-urllib/3.11\r\n"
      "Content-Type: application/json\r\n"
      "Connection: close\r\n"
      "\r\n"
      "{}";
  ASSERT_EQ(read_plain(urllib, &m), strlen(urllib));
  ASSERT_EQ(m.keep_alive, 0);
  ASSERT(read_plain("GET /p HTTP/1.1\r\nConnection:  CLOSE\r\n\r\n", &m) > 0);
  ASSERT_EQ(m.keep_alive, 0);
  /* Close wins over keep-alive, in either order. */
  ASSERT(read_plain("GET /p HTTP/1.1\r\nConnection: close\r\n"
                    "Connection: keep-alive\r\n\r\n",
                    &m) > 0);
  ASSERT_EQ(m.keep_alive, 0);
  ASSERT(read_plain("GET /p HTTP/1.1\r\nConnection: keep-alive\r\n"
                    "Connection: close\r\n\r\n",
                    &m) > 0);
  ASSERT_EQ(m.keep_alive, 0);
  /* The next message is read kept again. */
  ASSERT(read_plain("GET /p HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", &m) >
         0);
  ASSERT_EQ(m.keep_alive, 1);
  return 0;
}

/* Each of these is llhttp's to read: framing other than one
 * Content-Length, what the transport refuses or answers otherwise, bytes
 * outside the plain classes, and what is not all there yet. */
static const char *const not_plain[] = {
    /* framing */
    "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    "POST /p HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\nxy",
    "POST /p HTTP/1.1\r\nContent-Length: +1\r\n\r\nx",
    "POST /p HTTP/1.1\r\nContent-Length: 0x1\r\n\r\nx",
    "POST /p HTTP/1.1\r\nContent-Length: 1 1\r\n\r\nxx",
    "POST /p HTTP/1.1\r\nContent-Length: 1\t\r\n\r\nx",
    "POST /p HTTP/1.1\r\nContent-Length:\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", /* over MAX_BODY */
    "POST /p HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc", /* body not all here */
    "GET /p HTTP/1.1\r\nHost: a\r\n",                   /* head not all here */
    "GET /p HTTP/1.1\r\nHost: a\r\n\r",
    /* what the transport answers otherwise */
    "HEAD /p HTTP/1.1\r\n\r\n",
    "OPTIONS /p HTTP/1.1\r\n\r\n",
    "get /p HTTP/1.1\r\n\r\n",
    "GET /p HTTP/1.0\r\n\r\n",
    "GET /p HTTP/1.1 \r\n\r\n",
    "GET /p HTTP/2.0\r\n\r\n",
    "GET http://h/p HTTP/1.1\r\n\r\n",
    "OPTIONS * HTTP/1.1\r\n\r\n",
    "GET /p HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
    "GET /p HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
    "GET /p HTTP/1.1\r\nConnection: closed\r\n\r\n",
    "GET /p HTTP/1.1\r\nConnection: clos\r\n\r\n",
    "GET /p HTTP/1.1\r\nConnection: close, TE\r\n\r\n",
    "GET /p HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n",
    "GET /p HTTP/1.1\r\nConnection: close\t\r\n\r\n", /* kept, to llhttp */
    "GET /p HTTP/1.1\r\nConnection: close \r\n\r\n",
    "GET /p HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\n\r\n",
    "GET /p HTTP/1.1\r\nProxy-Connection: keep-alive\r\n\r\n",
    "GET /p HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "GET /p HTTP/1.1\r\nx-queen-tenant: a\r\nX-Queen-Tenant: a\r\n\r\n",
    "GET /p HTTP/1.1\r\nHost : a\r\n\r\n",
    "GET /p HTTP/1.1\r\nHost\t: a\r\n\r\n",
    /* bytes outside the plain classes */
    "GET /p HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
    "GET /p HTTP/1.1\nHost: a\n\n",
    "GET /p HTTP/1.1\r\nHost: a\n\r\n",
    "GET /p HTTP/1.1\r\nHost: a\rb\r\n\r\n",
    "GET /p HTTP/1.1\r\nX-A: \x01\r\n\r\n",
    "GET /p HTTP/1.1\r\nX-A: \x7f\r\n\r\n",
    "GET /p HTTP/1.1\r\nX-A: caf\xc3\xa9\r\n\r\n",
    "GET /p HTTP/1.1\r\n: a\r\n\r\n",
    "GET /p HTTP/1.1\r\nX(A): a\r\n\r\n",
    "GET /p HTTP/1.1\r\nX/A: a\r\n\r\n",
    "GET /p HTTP/1.1\r\nX\"A: a\r\n\r\n",
    "GET /p HTTP/1.1\r\nX-Quite-Long-Field(Name): a\r\n\r\n",
    /* A CR folds onto '-' by the 0x20 bit (ephd_head_header_of would take
     * "X-Queen\rTenant"), but it ends a name before any compare. */
    "GET /p HTTP/1.1\r\nX-Queen\rTenant: a\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent\rLength: 1\r\n\r\nx",
    /* past the first sixteen bytes, where the runs read sixteen at a time */
    "GET /p HTTP/1.1\r\nUser-Agent: Mozilla/5.0 (X11;\x01 Linux)\r\n\r\n",
    "GET /p HTTP/1.1\r\nUser-Agent: Mozilla/5.0 (X11;\x7f Linux)\r\n\r\n",
    "GET /p HTTP/1.1\r\nUser-Agent: Mozilla/5.0 (X11;\x80 Linux)\r\n\r\n",
    "GET /p HTTP/1.1\r\nUser-Agent: Mozilla/5.0 (X11;\r Linux)\r\n\r\n",
    "GET /p#frag HTTP/1.1\r\n\r\n",
    "GET /p\x7f HTTP/1.1\r\n\r\n",
    "GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
    "GET /p\tq HTTP/1.1\r\n\r\n",
    "GET  /p HTTP/1.1\r\n\r\n",
    "\r\nGET /p HTTP/1.1\r\n\r\n",
};

TEST_IMPL(plain_leaves_the_rest_to_llhttp) {
  ephd_plain_t m;
  for (size_t i = 0; i < COUNT(not_plain); i++) {
    if (read_plain(not_plain[i], &m) != 0) {
      fprintf(stderr, "read as plain: \"%s\"\n", not_plain[i]);
      return 1;
    }
  }
  /* A NUL in the target, which strlen would hide. */
  static const char nul[] = "GET /p\0q HTTP/1.1\r\n\r\n";
  ASSERT_EQ(ephd_head_read_plain(nul, sizeof(nul) - 1, MAX_HEAD, MAX_BODY, &m),
            0);
  /* A NUL in a value or a name. */
  static const char nul_value[] = "GET /p HTTP/1.1\r\nX-A: a\0b\r\n\r\n";
  static const char nul_name[] = "GET /p HTTP/1.1\r\nX\0A: a\r\n\r\n";
  ASSERT_EQ(ephd_head_read_plain(nul_value, sizeof(nul_value) - 1, MAX_HEAD,
                                 MAX_BODY, &m),
            0);
  ASSERT_EQ(ephd_head_read_plain(nul_name, sizeof(nul_name) - 1, MAX_HEAD,
                                 MAX_BODY, &m),
            0);
  /* A head past its bound, however small the request. */
  const char *get = "GET /p HTTP/1.1\r\nHost: a\r\n\r\n";
  ASSERT_EQ(ephd_head_read_plain(get, strlen(get), strlen(get), 0, &m),
            strlen(get));
  ASSERT_EQ(ephd_head_read_plain(get, strlen(get), strlen(get) - 1, 0, &m), 0);
  return 0;
}

TEST_IMPL(plain_header_names_any_case) {
  static const struct {
    const char *name;
    int header;
  } names[] = {
      {"x-queen-tenant", EPHD_HDR_TENANT},
      {"X-QUEEN-TENANT", EPHD_HDR_TENANT},
      {"authorization", EPHD_HDR_AUTHORIZATION},
      {"content-TYPE", EPHD_HDR_CONTENT_TYPE},
      {"Origin", EPHD_HDR_ORIGIN},
      {"HOST", EPHD_HDR_HOST},
      {"sec-fetch-site", EPHD_HDR_FETCH_SITE},
      {"X-Queen-Forward", EPHD_HDR_FORWARD},
      {"Hosts", -1},
      {"Hose", -1},
      {"x-queen-tenanT2", -1},
      {"content-length", -1},
      {"Content_Type", -1},
  };
  for (size_t i = 0; i < COUNT(names); i++)
    ASSERT_EQ(ephd_head_header_of(names[i].name, strlen(names[i].name)),
              names[i].header);
  return 0;
}

/* Every raw byte of a head counts, the whitespace a parser skips included:
 * the spaces before a value, read plain, take a head past its bound just as
 * its other bytes do, and a head's room is what is left of the bound. */
TEST_IMPL(head_bound_counts_raw_bytes) {
  ephd_plain_t m;
  char head[64];
  int n = snprintf(head, sizeof(head), "GET /p HTTP/1.1\r\nX-Pad:%*sv\r\n\r\n",
                   20, "");
  ASSERT_EQ(ephd_head_read_plain(head, (size_t)n, (size_t)n, 0, &m), (size_t)n);
  ASSERT_EQ(ephd_head_read_plain(head, (size_t)n, (size_t)n - 1, 0, &m), 0);
  /* Room: what is left of the bound, never more than what came. */
  ASSERT_EQ(ephd_head_room(0, 10, 2048), 10);
  ASSERT_EQ(ephd_head_room(2000, 100, 2048), 48);
  ASSERT_EQ(ephd_head_room(2048, 1, 2048), 0);
  ASSERT_EQ(ephd_head_room(4096, 1, 2048), 0);
  return 0;
}
