/* The cell's admin fan-out: see fanout.h. */
#include "fanout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "log.h"
#include "members.h"
#include "peer_client.h"
#include "prom.h"
#include "relay_edge.h"

static const char *const VERB_NAMES[EPHD_FANOUT_VERBS] = {"reset", "delete"};

/* What a member said: applied (2xx), refused (any other answer: its kill
 * switch, a token it does not share), or failed (not reached in time). */
enum { OUT_APPLIED, OUT_REFUSED, OUT_FAILED, N_OUTCOMES };
static const char *const OUTCOME_NAMES[N_OUTCOMES] = {"applied", "refused",
                                                      "failed"};
static uint64_t fanned[EPHD_FANOUT_VERBS][N_OUTCOMES];

/* A member that accepted the connection and does not answer (a stopped
 * process, a full loop) holds the client's answer at most this long: the
 * relay's deadline for a push (QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS). */
static uint64_t timeout_ms;

void ephd_fanout_init(uint64_t deadline_ms) { timeout_ms = deadline_ms; }

struct ephd_fanout {
  ephd_fanout_verb_t verb;
  uint32_t pending; /* members not yet answered; the send's own hold + 1 */
  void (*done)(void *data);
  void *data;
  size_t method_len, target_len, headers_len, body_len;
  char bytes[]; /* method, target, headers (the mark), body */
};

/* One member's send: which fan-out, and where it went (for the log). */
typedef struct {
  ephd_fanout_t *f;
  char address[EPHD_MEMBER_ADDRESS_MAX];
} send_t;

ephd_fanout_t *ephd_fanout_new(const ephd_request_t *req,
                               ephd_fanout_verb_t verb, const char *tenant,
                               size_t tenant_len) {
  if (!ephd_relay_sends_on(req)) return NULL;
  if (ephd_members_view()->count < 2) return NULL;
  ephd_marked_t m;
  size_t n = ephd_relay_marked_size(req, tenant_len, NULL, &m);
  ephd_fanout_t *f = malloc(sizeof(*f) + req->method.len + n);
  if (f == NULL) return NULL;
  f->verb = verb;
  f->pending = 0;
  f->method_len = req->method.len;
  f->target_len = m.target_len;
  f->headers_len = m.headers_len;
  f->body_len = m.body_len;
  memcpy(f->bytes, req->method.ptr, req->method.len);
  ephd_relay_write_marked(f->bytes + req->method.len, req, NULL, tenant,
                          tenant_len);
  return f;
}

void ephd_fanout_free(ephd_fanout_t *f) { free(f); }

static void settle(ephd_fanout_t *f) {
  if (--f->pending > 0) return;
  f->done(f->data);
  free(f);
}

static void on_answer(void *data, int result, const ephd_peer_response_t *res) {
  send_t *s = data;
  ephd_fanout_t *f = s->f;
  const char *verb = VERB_NAMES[f->verb];
  if (result == EPHD_PEER_OK && res->status >= 200 && res->status < 300) {
    fanned[f->verb][OUT_APPLIED]++;
  } else if (result == EPHD_PEER_OK) {
    fanned[f->verb][OUT_REFUSED]++;
    char status[16];
    snprintf(status, sizeof(status), "%d", res->status);
    ephd_log("warn", "fanout_refused", "verb", verb, "member", s->address,
             "status", status, NULL);
  } else {
    fanned[f->verb][OUT_FAILED]++;
    ephd_log("warn", "fanout_failed", "verb", verb, "member", s->address,
             "reason", ephd_peer_kind_name(result), NULL);
  }
  free(s);
  settle(f);
}

/* Whatever the relay says at once is the same as its later failure: the
 * member is counted failed, and the others are still sent to. */
static void send_one(ephd_fanout_t *f, const ephd_member_t *m) {
  const char *p = f->bytes;
  ephd_peer_request_t rq = {
      .method = {p, f->method_len},
      .target = {p + f->method_len, f->target_len},
      .headers = {p + f->method_len + f->target_len, f->headers_len},
      .body = {p + f->method_len + f->target_len + f->headers_len, f->body_len},
      .timeout_ms = timeout_ms,
  };
  send_t *s = malloc(sizeof(*s));
  ephd_peer_t *peer = ephd_peer(m->address);
  ephd_peer_call_t *handle;
  int rc = s && peer ? ephd_peer_send(peer, &rq, on_answer, s, &handle)
                     : EPHD_PEER_E_INVALID;
  if (rc != 0) {
    fanned[f->verb][OUT_FAILED]++;
    ephd_log("warn", "fanout_failed", "verb", VERB_NAMES[f->verb], "member",
             m->address, "reason", ephd_peer_kind_name(rc), NULL);
    free(s);
    return;
  }
  s->f = f;
  snprintf(s->address, sizeof(s->address), "%s", m->address);
  f->pending++;
}

int ephd_fanout_send(ephd_fanout_t *f, void (*done)(void *data), void *data) {
  f->done = done;
  f->data = data;
  f->pending = 0;
  const ephd_view_t *v = ephd_members_view();
  for (uint32_t i = 0; i < v->count; i++)
    if (i != v->self) send_one(f, &v->members[i]);
  if (f->pending > 0) return 0;
  free(f);
  return -1;
}

void ephd_fanout_metrics(ephd_buf_t *o) {
  const char *name = "queen_ephemeral_fanout_total";
  ephd_prom_family(o, name, "counter",
                   "Reset and delete requests sent to the other live members "
                   "of the cell, by route and what the member said.");
  ephd_prom_grid(o, name, "route", VERB_NAMES, EPHD_FANOUT_VERBS, "outcome",
                 OUTCOME_NAMES, N_OUTCOMES, &fanned[0][0]);
}

/* --- reset: the answer Lua made, held until the members answered ------- */

typedef struct {
  ephd_deferred_t *held; /* NULL once answered, or its client left */
  size_t len;
  char answer[];
} held_t;

static void answer_now(held_t *h) {
  if (h->held == NULL) return;
  ephd_conn_t *c = ephd_deferred_conn(h->held);
  h->held = NULL;
  ephd_buf_append(ephd_http_begin(c, 200, NULL), h->answer, h->len);
  ephd_http_end(c);
}

static void on_fanned(void *data) {
  answer_now(data);
  free(data);
}

static void on_client_left(void *data) { ((held_t *)data)->held = NULL; }

/* The broker stops: this broker's part is done, so its answer goes now;
 * the members' sends end with the relay (on_fanned frees). */
static void on_stop(void *data) { answer_now(data); }

static const ephd_deferred_ops_t HELD = {
    .cancel = on_client_left,
    .stop = on_stop,
};

int ephd_ffi_reset_fanout(const ephd_request_t *req, const char *tenant,
                          size_t tenant_len, const char *answer,
                          size_t answer_len) {
  ephd_fanout_t *f =
      ephd_fanout_new(req, EPHD_FANOUT_RESET, tenant, tenant_len);
  if (f == NULL) return EPHD_OK;
  held_t *h = malloc(sizeof(*h) + answer_len);
  if (h == NULL) {
    ephd_fanout_free(f);
    return EPHD_OK;
  }
  h->len = answer_len;
  memcpy(h->answer, answer, answer_len);
  if (ephd_fanout_send(f, on_fanned, h) != 0) {
    free(h);
    return EPHD_OK;
  }
  h->held = ephd_http_defer(req, &HELD, h);
  return EPHD_HELD;
}
