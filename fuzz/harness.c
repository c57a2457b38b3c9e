#include "harness.h"

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

#include "clock.h"
#include "commands.h"
#include "config.h"
#include "engine.h"
#include "fanout.h"
#include "relay_edge.h"
#include "handover.h"
#include "http.h"
#include "lua_host.h"
#include "members.h"
#include "metrics.h"
#include "op.h"
#include "peer_client.h"
#include "store.h"

static uv_loop_t *loop;
static ephd_engine_t engine;
static ephd_settings_t settings;
static int port;

/* libFuzzer calls this once, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  ephd_fuzz_boot();
  return 0;
}

void ephd_fuzz_boot(void) {
  if (loop) return;
  /* As the daemon's main() does: a peer that closed is an EPIPE to handle,
   * not a signal that ends the process (for the broker's writes and ours). */
  signal(SIGPIPE, SIG_IGN);
  /* Short waits and quick collection keep a long run's state small; no rate
   * limit, so every input reaches the code behind it. */
  setenv("QUEEN_EPHEMERAL_IMPLICIT_IDLE_S", "1", 1);
  setenv("QUEEN_EPHEMERAL_RATE", "0", 1);
  setenv("QUEEN_EPHEMERAL_HEADER_TIMEOUT_MS", "100", 1);
  char *argv[] = {"fuzz", NULL};
  if (ephd_config_load(&settings, 1, argv, EPHD_SOURCE_DIR "/policies/default",
                       EPHD_SOURCE_DIR "/lua/?.lua;" EPHD_BINARY_DIR
                                       "/lua/?.lua") != 0)
    abort();
  loop = uv_default_loop();
  ephd_engine_config_t config = {
      .epoch = 1,
      .defaults = settings.lua.defaults,
      .max_cell_bytes = settings.lua.max_cell_bytes,
      .idle_ms = 1000,
  };
  ephd_engine_init(&engine, loop, &config);
  ephd_clock_init(loop);
  ephd_commands_init(&engine);
  ephd_metrics_init(&engine, 0);
  char err[512];
  if (ephd_lua_host_start(loop, settings.lua_dir, settings.policy_dir, NULL,
                          settings.policy_dir, 60000, 100,
                          settings.policy_max_bytes, err, sizeof(err)) != 0) {
    fprintf(stderr, "fuzz: %s\n", err);
    abort();
  }
  ephd_store_start(loop, &engine, NULL, 30000, ephd_lua_host_apply_declarations,
                   ephd_lua_host_apply_grants);
  /* A cell of one, as main() boots it without a database: the cell's status
   * read, the relay's, the fan-out's and the hand-over's paths are
   * reachable from any input. */
  ephd_handover_limits_t handover_limits = {
      .timeout_ms = 5000, .max_bytes = 1 << 20, .max_body_bytes = 1 << 20};
  ephd_handover_init(loop, &engine, NULL, &handover_limits);
  ephd_members_on_change(ephd_handover_view_changed);
  ephd_members_start(loop, &engine, 1, "http://127.0.0.1:0", 0, 4000, NULL);
  ephd_peer_limits_t relay_limits = EPHD_PEER_LIMITS_DEFAULT;
  ephd_peer_init(loop, &relay_limits);
  ephd_relay_init(NULL, 5000, SIZE_MAX, NULL);
  ephd_fanout_init(5000);
  /* A small output bound, so that pipelined inputs pause and resume. */
  ephd_http_limits_t limits = {.max_body_bytes = 1 << 20,
                               .max_header_bytes = 16384,
                               .idle_timeout_ms = 60000,
                               .header_timeout_ms = 100,
                               .body_timeout_ms = 100,
                               .max_unwritten_bytes = 512};
  ephd_http_handlers_t handlers = {.dispatch = ephd_lua_host_dispatch,
                                   .answered = ephd_metrics_observe,
                                   .finished = ephd_op_release};
  if (ephd_http_start(loop, "127.0.0.1", 0, &limits, &handlers, err,
                      sizeof(err)) != 0) {
    fprintf(stderr, "fuzz: %s\n", err);
    abort();
  }
  port = ephd_http_port();
}

/* Runs the loop without blocking and drains what the broker wrote; returns
 * 0 once the connection is closed by the broker. */
static int pump(int fd) {
  uv_run(loop, UV_RUN_NOWAIT);
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) continue;
    if (n == 0) return 0;
    return errno == EAGAIN ? 1 : 0;
  }
}

void ephd_fuzz_exchange(const uint8_t *bytes, size_t len, uint8_t seed) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) abort();
  fcntl(fd, F_SETFL, O_NONBLOCK);
  uint32_t rng = seed * 2654435761u + 1;
  size_t off = 0;
  int open = 1;
  while (off < len && open) {
    rng = rng * 1103515245u + 12345u;
    size_t piece = 1 + (rng >> 16) % 512;
    if (piece > len - off) piece = len - off;
    ssize_t w = write(fd, bytes + off, piece);
    if (w > 0) off += (size_t)w;
    open = pump(fd);
  }
  for (int idle = 0; idle < 3 && open; idle++) open = pump(fd);
  close(fd);
  for (int i = 0; i < 3; i++) uv_run(loop, UV_RUN_NOWAIT);
}
