/* The cell's relay, the daemon's half: see forward.h. */
#define _GNU_SOURCE /* memmem */
#include "forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "http.h"
#include "members.h"
#include "relay.h"

/* A relayed pop that waits is held by its owner for its whole timeout:
 * its deadline is that plus this margin for the way there and back. */
#define PARK_MARGIN_MS 2000
/* Both 503s are worth retrying soon: a member's view settles within its
 * heartbeat, and an owner's death is seen within the TTL. */
#define RETRY_AFTER "Retry-After: 1\r\n"

static const char *const VERB_NAMES[EPHD_FORWARD_VERBS] = {"push", "pop",
                                                           "ack"};

/* What became of a request this broker relayed, or of a mark it was sent. */
enum {
  OUT_ANSWERED,  /* the owner's answer, passed back (owner_moved included) */
  OUT_REHASHED,  /* owner_moved, and sent once more to the new owner */
  OUT_FAILED,    /* the owner could not be reached or did not answer */
  OUT_CANCELLED, /* the client left first */
  OUT_STOPPED,   /* this broker stopped first */
  OUT_MOVED,     /* received marked, not ours: answered owner_moved */
  N_OUTCOMES
};
static const char *const OUTCOME_NAMES[N_OUTCOMES] = {
    "answered", "rehashed", "failed", "cancelled", "stopped", "owner_moved"};
static uint64_t forwarded[EPHD_FORWARD_VERBS][N_OUTCOMES];

static const char *token;
static size_t token_len;
/* A relayed push or ack is answered by its owner at once: this bounds the
 * wait for a peer that accepted the connection and does not answer (a
 * stopped process, a full loop). Past it the client hears
 * ephemeral_forward_failed, well within any client's own timeout. */
static uint64_t answer_timeout_ms;

void ephd_forward_init(const char *cell_token, uint64_t timeout_ms) {
  token = cell_token;
  token_len = cell_token ? strlen(cell_token) : 0;
  answer_timeout_ms = timeout_ms;
}

/* One relayed request: what a second send needs (the request's own bytes
 * live only during its dispatch), in one allocation. */
typedef struct {
  ephd_deferred_t *deferred;
  ephd_relay_t *relay; /* NULL while no send is pending */
  ephd_forward_verb_t verb;
  int rehashed;
  int parks;           /* a pop that waits: the relay's parking lane */
  uint64_t timeout_ms; /* the relay's deadline for each send */
  uint64_t owner;      /* the member it was last sent to */
  size_t target_len, headers_len, body_len, tenant_len, queue_len,
      partition_len;
  char bytes[]; /* target, headers, body, tenant, queue, partition */
} forward_t;

static const char *f_headers(const forward_t *f) {
  return f->bytes + f->target_len;
}
static const char *f_body(const forward_t *f) {
  return f_headers(f) + f->headers_len;
}
static const char *f_tenant(const forward_t *f) {
  return f_body(f) + f->body_len;
}
static const char *f_queue(const forward_t *f) {
  return f_tenant(f) + f->tenant_len;
}
static const char *f_partition(const forward_t *f) {
  return f_queue(f) + f->queue_len;
}

static void on_answer(void *data, int result, const ephd_relay_response_t *res);

static int send_to(forward_t *f, const ephd_member_t *owner) {
  ephd_relay_peer_t *peer = ephd_relay_peer(owner->address);
  if (peer == NULL) return EPHD_RELAY_E_INVALID;
  ephd_relay_request_t rq = {
      .method = f->verb == EPHD_FORWARD_POP ? (ephd_slice_t){"GET", 3}
                                            : (ephd_slice_t){"POST", 4},
      .target = {f->bytes, f->target_len},
      .headers = {f_headers(f), f->headers_len},
      .body = {f_body(f), f->body_len},
      .timeout_ms = f->timeout_ms,
      .parks = f->parks,
  };
  f->owner = owner->id;
  return ephd_relay_send(peer, &rq, on_answer, f, &f->relay);
}

static void refuse(ephd_conn_t *c, ephd_code_t code, const char *message) {
  ephd_error_write(ephd_http_begin(c, ephd_code_status(code), RETRY_AFTER),
                   code, message);
  ephd_http_end(c);
}

static void fail(ephd_conn_t *c, int kind) {
  char message[160];
  snprintf(message, sizeof(message),
           "the partition's owner could not be reached (%s); retry soon",
           ephd_relay_kind_name(kind));
  refuse(c, EPHD_CODE_EPHEMERAL_FORWARD_FAILED, message);
}

/* The owner's answer as it came: status, Content-Type, Retry-After, body.
 * Header values are copied out bounded (llhttp let no CR or LF through). */
static void pass_back(ephd_conn_t *c, const ephd_relay_response_t *res) {
  char type[128], extra[64];
  const char *ct = "application/json";
  if (res->content_type.len > 0 && res->content_type.len < sizeof(type)) {
    memcpy(type, res->content_type.ptr, res->content_type.len);
    type[res->content_type.len] = 0;
    ct = type;
  }
  extra[0] = 0;
  if (res->retry_after.len > 0 && res->retry_after.len < 32)
    snprintf(extra, sizeof(extra), "Retry-After: %.*s\r\n",
             (int)res->retry_after.len, res->retry_after.ptr);
  ephd_buf_t *o =
      ephd_http_begin_as(c, res->status, extra[0] ? extra : NULL, ct);
  ephd_buf_append(o, res->body.ptr, res->body.len);
  ephd_http_end(c);
}

static int says_owner_moved(const ephd_relay_response_t *res) {
  static const char code[] = "\"code\":\"owner_moved\"";
  return res->status == 503 &&
         memmem(res->body.ptr, res->body.len, code, sizeof(code) - 1) != NULL;
}

/* owner_moved: the owner's view and ours differ. Once, and only when our
 * own view now names another member than the one asked, send there;
 * otherwise the client has the 503 and its Retry-After. An owner that is
 * now this broker is not served here: the request's operation was read
 * for a relay, and the client's retry lands on the right broker. */
static int rehash(forward_t *f) {
  /* An ack went where its ids' epoch said, which no view changes. */
  if (f->rehashed || f->verb == EPHD_FORWARD_ACK) return 0;
  const ephd_view_t *v = ephd_members_view();
  if (v->count < 2) return 0;
  const ephd_member_t *owner =
      ephd_placement_owner(v, f_tenant(f), f->tenant_len, f_queue(f),
                           f->queue_len, f_partition(f), f->partition_len);
  if (owner == &v->members[v->self] || owner->id == f->owner) return 0;
  f->rehashed = 1;
  return send_to(f, owner) == 0;
}

static void on_answer(void *data, int result,
                      const ephd_relay_response_t *res) {
  forward_t *f = data;
  f->relay = NULL;
  if (result == EPHD_RELAY_OK && says_owner_moved(res) && rehash(f)) {
    forwarded[f->verb][OUT_REHASHED]++;
    return;
  }
  ephd_conn_t *c = ephd_deferred_conn(f->deferred);
  if (result == EPHD_RELAY_OK) {
    forwarded[f->verb][OUT_ANSWERED]++;
    pass_back(c, res);
  } else {
    forwarded[f->verb][OUT_FAILED]++;
    fail(c, result);
  }
  free(f);
}

static void on_cancel(void *data) {
  forward_t *f = data;
  if (f->relay) ephd_relay_cancel(f->relay);
  forwarded[f->verb][OUT_CANCELLED]++;
  free(f);
}

/* The broker stops: the relay is cancelled and the client told to retry
 * (elsewhere, or here once restarted), rather than cut off with no answer
 * while its push may or may not have been applied by the owner. */
static void on_stop(void *data) {
  forward_t *f = data;
  if (f->relay) ephd_relay_cancel(f->relay);
  forwarded[f->verb][OUT_STOPPED]++;
  refuse(ephd_deferred_conn(f->deferred), EPHD_CODE_EPHEMERAL_FORWARD_FAILED,
         "this broker is stopping; retry soon");
  free(f);
}

static const ephd_deferred_ops_t FORWARDED = {
    .deadline = NULL, /* the relay's own deadline ends every send */
    .cancel = on_cancel,
    .stop = on_stop,
};

static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

/* The request as it will be sent again: its path and query, the mark, its
 * body, and the key placement hashed. */
static forward_t *forward_new(const ephd_request_t *req,
                              ephd_forward_verb_t verb, uint64_t park_ms,
                              const char *tenant, size_t tenant_len,
                              ephd_slice_t queue, ephd_slice_t partition) {
  static const char ct[] = "Content-Type: application/json\r\n";
  static const char mark[] = "X-Queen-Forward: ";
  size_t ct_len = req->body.len ? sizeof(ct) - 1 : 0;
  size_t target_len = req->path.len + (req->query.len ? 1 + req->query.len : 0);
  size_t headers_len =
      ct_len + sizeof(mark) - 1 + token_len + 1 + tenant_len + 2;
  size_t n = target_len + headers_len + req->body.len + tenant_len + queue.len +
             partition.len;
  forward_t *f = malloc(sizeof(*f) + n);
  if (f == NULL) return NULL;
  f->relay = NULL;
  f->verb = verb;
  f->rehashed = 0;
  f->parks = park_ms > 0;
  f->timeout_ms = park_ms ? park_ms + PARK_MARGIN_MS : answer_timeout_ms;
  f->target_len = target_len;
  f->headers_len = headers_len;
  f->body_len = req->body.len;
  f->tenant_len = tenant_len;
  f->queue_len = queue.len;
  f->partition_len = partition.len;
  char *p = put(f->bytes, req->path.ptr, req->path.len);
  if (req->query.len) {
    *p++ = '?';
    p = put(p, req->query.ptr, req->query.len);
  }
  p = put(p, ct, ct_len);
  p = put(p, mark, sizeof(mark) - 1);
  p = put(p, token, token_len);
  *p++ = ' ';
  p = put(p, tenant, tenant_len);
  p = put(p, "\r\n", 2);
  p = put(p, req->body.ptr, req->body.len);
  p = put(p, tenant, tenant_len);
  p = put(p, queue.ptr, queue.len);
  put(p, partition.ptr, partition.len);
  return f;
}

int ephd_forward_route(const ephd_request_t *req, ephd_forward_verb_t verb,
                       uint64_t park_ms, const ephd_view_t *view,
                       const char *tenant, size_t tenant_len,
                       ephd_slice_t queue, ephd_slice_t partition) {
  /* Without a token no mark can be trusted: every broker serves what it is
   * sent, as before the relay (docs/cell.md). */
  if (token == NULL) return EPHD_OK;
  const ephd_member_t *owner =
      ephd_placement_owner(view, tenant, tenant_len, queue.ptr, queue.len,
                           partition.ptr, partition.len);
  if (owner == &view->members[view->self]) return EPHD_OK;
  ephd_conn_t *c = ephd_http_conn(req);
  if (req->forward.len > 0) {
    /* Relayed here by a member whose view differs: never relayed again, so
     * two views cannot send a request around. */
    forwarded[verb][OUT_MOVED]++;
    refuse(c, EPHD_CODE_OWNER_MOVED,
           "this broker does not own the partition; retry soon");
    return EPHD_RELAYED;
  }
  forward_t *f =
      forward_new(req, verb, park_ms, tenant, tenant_len, queue, partition);
  int rc = f ? send_to(f, owner) : EPHD_RELAY_E_INVALID;
  if (rc != 0) {
    forwarded[verb][OUT_FAILED]++;
    free(f);
    fail(c, rc);
    return EPHD_RELAYED;
  }
  f->deferred = ephd_http_defer(req, &FORWARDED, f);
  return EPHD_RELAYED;
}

int ephd_forward_ack(const ephd_request_t *req, const ephd_view_t *view,
                     uint32_t epoch, const char *tenant, size_t tenant_len) {
  if (token == NULL || req->forward.len > 0) return EPHD_OK;
  const ephd_member_t *owner = NULL;
  for (uint32_t i = 0; i < view->count; i++)
    if (view->members[i].epoch == epoch) owner = &view->members[i];
  if (owner == NULL || owner == &view->members[view->self]) return EPHD_OK;
  ephd_slice_t none = {"", 0};
  forward_t *f =
      forward_new(req, EPHD_FORWARD_ACK, 0, tenant, tenant_len, none, none);
  int rc = f ? send_to(f, owner) : EPHD_RELAY_E_INVALID;
  if (rc != 0) {
    forwarded[EPHD_FORWARD_ACK][OUT_FAILED]++;
    free(f);
    fail(ephd_http_conn(req), rc);
    return EPHD_RELAYED;
  }
  f->deferred = ephd_http_defer(req, &FORWARDED, f);
  return EPHD_RELAYED;
}

/* "<token> <tenant>": the token compared in time that does not depend on
 * where the first difference is. */
int ephd_ffi_forward_tenant(const ephd_request_t *req, ephd_slice_t *tenant) {
  const char *m = req->forward.ptr;
  size_t len = req->forward.len;
  if (token == NULL || len <= token_len || m[token_len] != ' ')
    return EPHD_E_REFUSED;
  unsigned char diff = 0;
  for (size_t i = 0; i < token_len; i++)
    diff |= (unsigned char)(m[i] ^ token[i]);
  if (diff != 0) return EPHD_E_REFUSED;
  tenant->ptr = m + token_len + 1;
  tenant->len = len - token_len - 1;
  return EPHD_OK;
}

void ephd_forward_metrics(ephd_buf_t *o) {
  const char *name = "queen_ephemeral_forwarded_total";
  ephd_buf_appends(o,
                   "# HELP queen_ephemeral_forwarded_total Requests relayed "
                   "to their partition's owner, and marked ones received "
                   "for a partition not owned (owner_moved), by route and "
                   "outcome.\n# TYPE queen_ephemeral_forwarded_total "
                   "counter\n");
  char line[160];
  for (int v = 0; v < EPHD_FORWARD_VERBS; v++)
    for (int k = 0; k < N_OUTCOMES; k++) {
      snprintf(line, sizeof(line), "%s{route=\"%s\",outcome=\"%s\"} ", name,
               VERB_NAMES[v], OUTCOME_NAMES[k]);
      ephd_buf_appends(o, line);
      ephd_buf_append_u64(o, forwarded[v][k]);
      ephd_buf_append(o, "\n", 1);
    }
  const ephd_relay_stats_t *s = ephd_relay_stats();
  ephd_buf_appends(o,
                   "# HELP queen_ephemeral_relay_seconds Seconds from a "
                   "relayed request's send to its owner's whole answer.\n"
                   "# TYPE queen_ephemeral_relay_seconds summary\n");
  snprintf(line, sizeof(line), "queen_ephemeral_relay_seconds_sum %.6f\n",
           (double)s->latency_ns_sum / 1e9);
  ephd_buf_appends(o, line);
  ephd_buf_appends(o, "queen_ephemeral_relay_seconds_count ");
  ephd_buf_append_u64(o, s->latency_count);
  ephd_buf_append(o, "\n", 1);
}
