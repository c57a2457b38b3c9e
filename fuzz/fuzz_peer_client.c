/* The relay's answer side: the input is what a peer answers to the
 * requests relayed to it. Byte 0 chooses how the answers are torn across
 * writes; byte 1's bits ask for a HEAD request, a parking request, a
 * cancel half-way, and a pipeline: one to four requests on one pipe,
 * written together, whose answers the input holds in order (the cancel
 * then takes one of them). The rest is the answers, after which the peer
 * closes. The client must call back exactly once per request (never after
 * a cancel), with slices inside what it read, and hold nothing once the
 * loop has run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "peer_client.h"

static uv_loop_t *loop;
static int listen_fd;
static ephd_peer_t *peer;
static int calls[4], ncalls;
static volatile unsigned sink;

static void touch(ephd_slice_t s) {
  for (size_t i = 0; i < s.len; i++) sink += (unsigned char)s.ptr[i];
}

static void on_done(void *data, int kind, const ephd_peer_response_t *res) {
  ncalls++;
  if (++calls[(int *)data - calls] > 1) abort();
  if ((kind == EPHD_PEER_OK) != (res != NULL)) abort();
  if (res == NULL) return;
  if (res->status < 200 || res->status > 999) abort();
  touch(res->content_type);
  touch(res->retry_after);
  touch(res->owner);
  touch(res->body);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  signal(SIGPIPE, SIG_IGN);
  loop = uv_default_loop();
  ephd_peer_limits_t limits = EPHD_PEER_LIMITS_DEFAULT;
  /* Small enough for inputs to pass them. */
  limits.max_header_bytes = 2048;
  limits.max_response_bytes = 4096;
  ephd_peer_init(loop, &limits);
  listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(listen_fd, 64) != 0 ||
      getsockname(listen_fd, (struct sockaddr *)&a, &len) != 0)
    abort();
  fcntl(listen_fd, F_SETFL, O_NONBLOCK);
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
  peer = ephd_peer(addr);
  if (peer == NULL) abort();
  return 0;
}

static int heads(const char *got) {
  int n = 0;
  for (const char *p = got; (p = strstr(p, "\r\n\r\n")); p += 4) n++;
  return n;
}

/* Runs the loop once without blocking; accepts the relay's connection
 * when it comes and reads its requests. Returns the peer's socket once
 * `want` whole request heads have arrived on it. */
static int serve(int *fd, char *got, size_t *ngot, int want) {
  uv_run(loop, UV_RUN_NOWAIT);
  if (*fd < 0) {
    *fd = accept(listen_fd, NULL, NULL);
    if (*fd < 0) return -1;
    fcntl(*fd, F_SETFL, O_NONBLOCK);
    *ngot = 0;
  }
  ssize_t n = read(*fd, got + *ngot, 1023 - *ngot);
  if (n == 0) { /* a stale pooled connection: the relay tries afresh */
    close(*fd);
    *fd = -1;
    return -1;
  }
  if (n > 0) *ngot += (size_t)n;
  got[*ngot] = 0;
  return heads(got) >= want ? *fd : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 16384) return 0;
  uint8_t seed = data[0], flags = data[1];
  data += 2;
  size -= 2;
  memset(calls, 0, sizeof(calls));
  ncalls = 0;
  /* A HEAD or a parking request never goes on a pipe. */
  int piped = (flags & 8) && !(flags & 3);
  int n = piped ? 1 + (flags >> 4) % 4 : 1, victim = (flags >> 6) % n;
  ephd_peer_request_t req = {
      .method = {flags & 1 ? "HEAD" : "GET", 3 + (flags & 1)},
      .target = {"/fuzz", 5},
      .headers = {"", 0},
      .body = {"", 0},
      .timeout_ms = 2000,
      .parks = (flags & 2) != 0,
      .key = piped,
  };
  ephd_peer_call_t *r[4];
  for (int i = 0; i < n; i++)
    if (ephd_peer_send(peer, &req, on_done, &calls[i], &r[i]) != 0) abort();
  int fd = -1, cancelled = 0;
  char got[1024];
  size_t ngot = 0;
  for (int i = 0; i < 10000 && ncalls == 0; i++)
    if (serve(&fd, got, &ngot, n) >= 0) break;
  uint32_t rng = seed * 2654435761u + 1;
  size_t off = 0;
  while (fd >= 0 && off < size && ncalls < n) {
    rng = rng * 1103515245u + 12345u;
    size_t piece = 1 + (rng >> 16) % 512;
    if (piece > size - off) piece = size - off;
    ssize_t w = write(fd, data + off, piece);
    if (w <= 0) break; /* the relay closed it, or will not read more */
    off += (size_t)w;
    if ((flags & 4) && off >= size / 2 && !cancelled && !calls[victim]) {
      ephd_peer_cancel(r[victim]);
      cancelled = 1;
      if (!piped) break;
    }
    for (int k = 0; k < 3; k++) uv_run(loop, UV_RUN_NOWAIT);
  }
  if (fd >= 0) close(fd);
  /* EOF ends whatever the answers left open, well before the deadline. */
  while (ncalls < n - cancelled) uv_run(loop, UV_RUN_ONCE);
  for (int i = 0; i < n; i++)
    if (calls[i] != (cancelled && i == victim ? 0 : 1)) abort();
  /* A cancelled request's answer is read and dropped, or goes with its
   * connection's EOF. */
  const ephd_peer_stats_t *st = ephd_peer_stats();
  for (int k = 0; k < 1000 && (st->in_flight || st->bytes); k++)
    uv_run(loop, UV_RUN_NOWAIT);
  if (st->in_flight || st->queued || st->bytes) abort();
  for (int k = 0; k < 4; k++) uv_run(loop, UV_RUN_NOWAIT);
  return 0;
}
