/* The relay's answer side: the input is what a peer answers to one
 * relayed request. Byte 0 chooses how the answer is torn across writes;
 * byte 1's bits ask for a HEAD request, a parking request, and a cancel
 * half-way; the rest is the answer, after which the peer closes. The
 * client must call back exactly once (never after a cancel), with slices
 * inside what it read, and hold nothing once the loop has run. */
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
static int calls;
static volatile unsigned sink;

static void touch(ephd_slice_t s) {
  for (size_t i = 0; i < s.len; i++) sink += (unsigned char)s.ptr[i];
}

static void on_done(void *data, int kind, const ephd_peer_response_t *res) {
  (void)data;
  if (++calls > 1) abort();
  if ((kind == EPHD_PEER_OK) != (res != NULL)) abort();
  if (res == NULL) return;
  if (res->status < 200 || res->status > 999) abort();
  touch(res->content_type);
  touch(res->retry_after);
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

/* Runs the loop once without blocking; accepts the relay's connection
 * when it comes and reads its request. Returns the peer's socket once a
 * whole request head has arrived on it. */
static int serve(int *fd, char *got, size_t *ngot) {
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
  return strstr(got, "\r\n\r\n") ? *fd : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 16384) return 0;
  uint8_t seed = data[0], flags = data[1];
  data += 2;
  size -= 2;
  calls = 0;
  ephd_peer_request_t req = {
      .method = {flags & 1 ? "HEAD" : "GET", 3 + (flags & 1)},
      .target = {"/fuzz", 5},
      .headers = {"", 0},
      .body = {"", 0},
      .timeout_ms = 2000,
      .parks = (flags & 2) != 0,
  };
  ephd_peer_call_t *r;
  if (ephd_peer_send(peer, &req, on_done, NULL, &r) != 0) abort();
  int fd = -1, cancelled = 0;
  char got[1024];
  size_t ngot = 0;
  for (int i = 0; i < 10000 && calls == 0; i++)
    if (serve(&fd, got, &ngot) >= 0) break;
  uint32_t rng = seed * 2654435761u + 1;
  size_t off = 0;
  while (fd >= 0 && off < size && calls == 0) {
    rng = rng * 1103515245u + 12345u;
    size_t piece = 1 + (rng >> 16) % 512;
    if (piece > size - off) piece = size - off;
    ssize_t w = write(fd, data + off, piece);
    if (w <= 0) break; /* the relay closed it, or will not read more */
    off += (size_t)w;
    if ((flags & 4) && off >= size / 2 && !cancelled) {
      ephd_peer_cancel(r);
      cancelled = 1;
      break;
    }
    for (int k = 0; k < 3; k++) uv_run(loop, UV_RUN_NOWAIT);
  }
  if (fd >= 0) close(fd);
  /* EOF ends whatever the answer left open, well before the deadline. */
  while (calls == 0 && !cancelled) uv_run(loop, UV_RUN_ONCE);
  if (calls != (cancelled ? 0 : 1)) abort();
  for (int k = 0; k < 4; k++) uv_run(loop, UV_RUN_NOWAIT);
  return 0;
}
