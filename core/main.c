/* ephd: flags and knobs, the boot order, signals and a clean stop. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "clock.h"
#include "commands.h"
#include "config.h"
#include "engine.h"
#include "fanout.h"
#include "handover.h"
#include "http.h"
#include "log.h"
#include "lua_host.h"
#include "mark.h"
#include "members.h"
#include "metrics.h"
#include "op.h"
#include "peer_client.h"
#include "relay_edge.h"
#include "store.h"

#ifndef EPHD_SOURCE_DIR
#error "the build defines EPHD_SOURCE_DIR, EPHD_BINARY_DIR and EPHD_DATA_DIR"
#endif

static uv_signal_t sigterm, sigint, sighup;
static uv_timer_t stop_deadline;
static int stopping;
/* How long a stop may wait for the hand-over of a member that stopped just
 * before: its hand-over's time, and a heartbeat to see its row gone. */
static uint64_t stop_wait_ms;

/* Clients that will not read their answers do not hold the stop: each
 * half second closes what is written or not, but a relay still waiting
 * for its owner (within its own deadline), whose client hears the owner's
 * answer before its connection closes. */
static void on_deadline(uv_timer_t *t) {
  if (ephd_http_abort() > 0) uv_timer_start(t, on_deadline, 500, 0);
}

static void on_sighup(uv_signal_t *s, int signum) {
  (void)s;
  (void)signum;
  ephd_lua_host_reload();
}

/* The database connection would keep the loop alive. */
static void on_left_cell(void) { ephd_store_stop(); }

/* The requests this broker sent its peers have their answers (or their
 * deadlines passed): the peer client's connections close, so the loop can
 * end; then the membership row goes, while the database connection is
 * still there, so the others stop counting this broker at their next
 * read, not after the TTL. The members that answered the leaving notice
 * route elsewhere already. */
static void on_drained(void) {
  ephd_peer_close_all();
  ephd_members_leave(1000, on_left_cell);
}

/* Once the partitions are handed over (or their time is up), the relays
 * still out finish with their owners' answers. */
static void on_handed_over(void) { ephd_peer_drain(on_drained); }

/* The members that answered the leaving notice route this broker's
 * partitions to their new owners already. Then the listener stops (the
 * held requests answered: a relayed one cancels its own relay), and with
 * nothing more coming in the partitions go to their owners among the
 * members staying (bounded by the hand-over's timeout), never to one
 * stopping too. */
static void on_announced(void) {
  ephd_http_stop();
  ephd_handover_leave(ephd_members_staying(), on_handed_over);
  /* Answers to parked polls get a moment to be written; a peer that will
   * not read them does not hold the stop past the deadline. */
  uv_timer_start(&stop_deadline, on_deadline, 500, 0);
  uv_unref((uv_handle_t *)&stop_deadline);
}

static void on_signal(uv_signal_t *s, int signum) {
  (void)s;
  if (stopping) return;
  stopping = 1;
  char sig[16];
  snprintf(sig, sizeof(sig), "%d", signum);
  ephd_log("info", "stopping", "signal", sig, NULL);
  /* The members first, while this broker still listens: from their answer
   * on they route its partitions to the new owners, so no client hears a
   * refused connection from it in between; what still reaches it here is
   * served, and handed over with the rest. */
  ephd_members_announce(stop_wait_ms, 1000, on_announced);
}

/* glibc keeps freed heap for reuse, and Lua garbage not yet collected pins
 * pages between freed blocks: after a busy spell (requests, closes,
 * collected queues) is followed by a whole quiet second, collect, then hand
 * free pages back. Nothing while busy; once per quiet spell. */
static uv_timer_t quiet_timer;
static uint64_t activity_seen, activity_released;

static void on_quiet_check(uv_timer_t *t) {
  ephd_engine_t *engine = t->data;
  uint64_t now = ephd_http_activity() + ephd_engine_collected(engine);
  if (now == activity_seen && now != activity_released) {
    ephd_lua_host_collect();
    malloc_trim(0);
    activity_released = now;
  }
  activity_seen = now;
}

/* A binary run from its build tree uses the source tree's Lua and policies;
 * an installed one uses the installed copies. */
static int in_build_tree(void) {
  char exe[4096];
  size_t n = sizeof(exe);
  if (uv_exepath(exe, &n) != 0) return 0;
  char *slash = strrchr(exe, '/');
  if (slash == NULL) return 0;
  *slash = 0;
  return strcmp(exe, EPHD_BINARY_DIR) == 0;
}

static uint32_t draw_epoch(void) {
  uint32_t e = 0;
  while (e == 0)
    if (uv_random(NULL, NULL, &e, sizeof(e), 0, NULL) != 0)
      e = (uint32_t)uv_hrtime();
  return e;
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* A standard descriptor the process was started without (`>&-`) is held
 * on /dev/null opened the wrong way round: it stays closed to its users (a
 * write to stdout fails, EBADF, as it would have), but the next open()
 * cannot take its number. Else the CLI's first socket was its stdout, and
 * what it printed went to the broker as requests. */
static void hold_std_fds(void) {
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF)
      (void)open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
}

int main(int argc, char **argv) {
  hold_std_fds();
  int built = in_build_tree();
  const char *policy_dir = built ? EPHD_SOURCE_DIR "/policies/default"
                                 : EPHD_DATA_DIR "/policies/default";
  const char *lua_path = built ? EPHD_SOURCE_DIR "/lua/?.lua;" EPHD_BINARY_DIR
                                                 "/lua/?.lua"
                               : EPHD_DATA_DIR "/lua/?.lua";
  ephd_settings_t s;
  /* A first word that is not a flag is a command, and every command but
   * `policy check` is ephd.cli's, which knows them and refuses the rest. */
  if (argc >= 2 && argv[1][0] != '-' &&
      (strcmp(argv[1], "policy") != 0 ||
       (argc >= 3 &&
        (strcmp(argv[2], "test") == 0 || strcmp(argv[2], "replay") == 0 ||
         strcmp(argv[2], "shadow") == 0))))
    return ephd_lua_host_cli(lua_path, argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "policy") == 0) {
    if (argc != 4 || strcmp(argv[2], "check") != 0) {
      fprintf(stderr,
              "usage: ephd policy check DIR\n"
              "       ephd policy test DIR [BUSTED ARGS...]\n"
              "       ephd policy replay --policy DIR --log FILE\n"
              "       ephd policy shadow [--url URL] [--watch]\n");
      return argc == 3 && strcmp(argv[2], "--help") == 0 ? 0 : 2;
    }
    /* The broker's Lua reads its settings as it loads: the knobs hold. */
    if (ephd_config_load(&s, 1, argv, policy_dir, lua_path) != 0) return 2;
    return ephd_lua_host_check(lua_path, argv[3], policy_dir,
                               s.policy_budget_ms, s.policy_max_bytes);
  }
  int rc = ephd_config_load(&s, argc, argv, policy_dir, lua_path);
  if (rc != 0) return rc > 0 ? 0 : 2;
  ephd_log_debug(s.log_debug);
  signal(SIGPIPE, SIG_IGN);

  uv_loop_t *loop = uv_default_loop();
  /* A tenant without queues is forgotten no sooner than a meter tick has
   * seen its last counts (they cannot change while it has no queue). */
  uint64_t idle_ms = s.implicit_idle_s * 1000, meter_ms = s.meter_s * 1000;
  ephd_engine_config_t ec = {
      .epoch = draw_epoch(),
      .defaults = s.lua.defaults,
      .max_cell_bytes = s.lua.max_cell_bytes,
      .idle_ms = idle_ms,
      .forget_ms = idle_ms > meter_ms ? idle_ms : meter_ms,
      .max_partitions = (uint32_t)s.max_partitions,
      .max_groups = (uint32_t)s.max_groups,
  };
  ephd_engine_t engine;
  ephd_engine_init(&engine, loop, &ec);
  ephd_clock_init(loop);
  ephd_commands_init(&engine);
  ephd_metrics_init(&engine, (uint32_t)s.metrics_queues);

  char err[512];
  if (ephd_lua_host_start(loop, s.lua_dir, s.policy_dir, s.shadow_dir,
                          policy_dir, s.meter_s * 1000, s.policy_budget_ms,
                          s.policy_max_bytes, err, sizeof(err)) != 0) {
    ephd_log("error", "boot_failed", "reason", err, NULL);
    return 2;
  }
  /* Declarations are in memory before the first request can see a queue. */
  ephd_store_start(loop, &engine, s.database_url, s.refresh_s * 1000,
                   ephd_lua_host_apply_declarations,
                   ephd_lua_host_apply_grants);
  ephd_store_boot(5000);
  /* So is the cell, before the first request could need an owner. */
  ephd_handover_limits_t handover_limits = {
      .timeout_ms = s.handover_timeout_ms,
      .max_bytes = s.handover_max_bytes,
      .max_body_bytes = s.max_body_bytes,
  };
  /* Without libcrypto's HMAC nothing can be signed or checked: the broker
   * then neither relays, trusts a mark, nor signs its row, as without a
   * token (each module is told the same). */
  if (ephd_mark_init(s.cell_token, s.advertise) != 0) {
    ephd_log("error", "mark_unavailable", "msg",
             "libcrypto gave no HMAC-SHA256: the cell token is ignored", NULL);
    s.cell_token = NULL;
  }
  ephd_handover_init(loop, &engine, s.cell_token, &handover_limits);
  stop_wait_ms = s.handover_timeout_ms + s.member_ttl_ms;
  ephd_members_on_change(ephd_handover_view_changed);
  ephd_members_start(loop, &engine, engine.epoch, s.advertise,
                     s.database_url != NULL, s.member_ttl_ms, s.cell_token);
  /* A peer answers a relayed pop with a batch stopped at one body's bytes
   * (ephd_relay_batch_bytes) plus its last delivery, itself at most one
   * body, and the answer's own few bytes: twice a body and the header
   * limit hold it. Any other answer is smaller. */
  ephd_peer_limits_t relay_limits = {
      .max_conns = (uint32_t)s.relay_max_conns,
      .max_parked = (uint32_t)s.relay_max_parked,
      .max_queued = (uint32_t)s.relay_max_queued,
      .max_idle = (uint32_t)s.relay_max_idle,
      .pipes = (uint32_t)s.relay_pipes,
      .max_parked_share = (uint32_t)s.relay_tenant_parked,
      .idle_timeout_ms = s.relay_idle_timeout_ms,
      .resolve_ttl_ms = s.relay_resolve_ttl_ms,
      .max_header_bytes = s.max_header_bytes,
      .max_response_bytes = 2 * s.max_body_bytes + s.max_header_bytes,
      .max_peer_bytes = s.relay_max_peer_bytes,
  };
  ephd_peer_init(loop, &relay_limits);
  /* Every connection to a member opens a peer session (cell/mark.h). */
  if (s.cell_token)
    ephd_peer_session(ephd_mark_session_write, EPHD_SESSION_LINE);
  ephd_relay_init(s.cell_token, s.relay_timeout_ms, s.max_body_bytes,
                  ephd_lua_host_refund);
  ephd_fanout_init(s.relay_timeout_ms);
  /* With the relay up: the boot asks the members it reads if they are
   * ready. */
  ephd_members_boot(2000);
  ephd_http_limits_t limits = {
      .max_body_bytes = s.max_body_bytes,
      .max_header_bytes = s.max_header_bytes,
      .idle_timeout_ms = s.idle_timeout_s * 1000,
      .header_timeout_ms = s.header_timeout_ms,
      .body_timeout_ms = s.body_timeout_ms,
      .max_unwritten_bytes = s.max_unwritten_bytes,
      .max_client_bytes = s.max_client_bytes,
      .log_refusals = s.lua.log_refusals,
  };
  ephd_http_handlers_t handlers = {
      .dispatch = ephd_lua_host_dispatch,
      .answered = ephd_metrics_observe,
      .finished = ephd_op_release,
  };
  /* Before the port opens: a client may signal as soon as it can connect,
   * and SIGHUP's default would end the process (the callbacks run only in
   * the loop, once everything below is ready). */
  uv_signal_init(loop, &sigterm);
  uv_signal_init(loop, &sigint);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  uv_signal_start(&sigint, on_signal, SIGINT);
  uv_signal_init(loop, &sighup);
  uv_signal_start(&sighup, on_sighup, SIGHUP);
  uv_unref((uv_handle_t *)&sighup);
  /* Signal watchers stay installed to the end, so a second signal during the
   * stop is absorbed, but they do not keep the loop alive on their own. */
  uv_unref((uv_handle_t *)&sigterm);
  uv_unref((uv_handle_t *)&sigint);
  if (ephd_http_start(loop, s.listen_host, s.listen_port, &limits, &handlers,
                      err, sizeof(err)) != 0) {
    ephd_log("error", "boot_failed", "reason", err, NULL);
    ephd_lua_host_close();
    return 2;
  }
  uv_timer_init(loop, &quiet_timer);
  quiet_timer.data = &engine;
  uv_timer_start(&quiet_timer, on_quiet_check, 1000, 1000);
  uv_unref((uv_handle_t *)&quiet_timer);
  ephd_config_log(&s);
  char addr[300], epoch[16], pid[24];
  snprintf(addr, sizeof(addr), "%s:%d", s.listen_host, s.listen_port);
  snprintf(epoch, sizeof(epoch), "%08x", ephd_engine_epoch(&engine));
  /* The process to signal, whatever started it (scripts/run is a parent). */
  snprintf(pid, sizeof(pid), "%d", (int)uv_os_getpid());
  ephd_log("info", "listening", "addr", addr, "epoch", epoch, "pid", pid, NULL);

  uv_timer_init(loop, &stop_deadline);
  uv_run(loop, UV_RUN_DEFAULT);

  ephd_engine_close(&engine);
  ephd_members_close();
  ephd_op_close();
  ephd_lua_host_close();
  uv_walk(loop, close_walk, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  ephd_log("info", "stopped", NULL);
  return 0;
}
