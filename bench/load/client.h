/* Client connections of the load generator: one TCP connection speaking
 * HTTP/1.1 (responses parsed by llhttp) or RESP, delivering each complete
 * reply to its owner. Writes never wait: what the socket does not take at
 * once is copied and queued, so callers may reuse their buffers. */
#ifndef LOAD_CLIENT_H
#define LOAD_CLIENT_H

#include <llhttp.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef enum { LOAD_HTTP, LOAD_RESP } load_proto_t;

typedef struct load_conn load_conn_t;

/* HTTP: status is the response's status code and body its body.
 * RESP: status is the reply's type byte ('+', '-', ':', '$', '*'), or 0 for
 * a nil reply; body is the bulk string (for an array, its last element). */
typedef void (*load_reply_cb)(load_conn_t *c, int status, const char *body,
                              size_t len);
typedef void (*load_connect_cb)(load_conn_t *c);

typedef struct {
  char *data;
  size_t len, cap;
} load_buf_t;

struct load_conn {
  uv_tcp_t tcp;
  uv_connect_t connect;
  load_proto_t proto;
  llhttp_t parser;
  load_buf_t body; /* HTTP: the body of the response being read */
  load_buf_t in;   /* RESP: bytes not yet forming a whole reply */
  load_reply_cb on_reply;
  load_connect_cb on_connect;
  void *owner;    /* the scenario's state for this connection */
  uint64_t stamp; /* the scenario's clock mark */
  uint64_t sends; /* the scenario's count of sends on this connection */
  uint32_t index, outstanding;
};

/* Fatal: the generator stops, naming the reason. A benchmark that loses a
 * connection has no figure to report. */
void load_die(const char *what, const char *detail);

void load_buf_reserve(load_buf_t *b, size_t more);
void load_buf_add(load_buf_t *b, const void *data, size_t len);
void load_buf_addf(load_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Connects to 127.0.0.1:port; on_connect runs once the socket is up. */
void load_conn_open(uv_loop_t *loop, load_conn_t *c, load_proto_t proto,
                    int port, load_connect_cb on_connect,
                    load_reply_cb on_reply);
void load_conn_send(load_conn_t *c, const char *data, size_t len);
void load_conn_close(load_conn_t *c);

/* One HTTP/1.1 request, keep-alive, into b (appended). */
void load_http_request(load_buf_t *b, const char *method, const char *path,
                       const char *body, size_t body_len);
/* One RESP command of argc bulk strings, into b (appended). */
void load_resp_command(load_buf_t *b, int argc, const char **argv,
                       const size_t *lens);

#endif
