/* The relay at the edge, and the mark's check at the owner: see
 * relay_edge.h. */
#define _GNU_SOURCE /* memmem */
#include "relay_edge.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ack_result.h"
#include "commands.h"
#include "delivery.h"
#include "errors.h"
#include "handover.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "mark.h"
#include "members.h"
#include "op.h"
#include "peer_client.h"
#include "prom.h"
#include "scan.h"

/* A relayed pop that waits is held by its owner for its whole timeout:
 * its deadline is that plus this margin for the way there and back. */
#define PARK_MARGIN_MS 2000
/* Both 503s are worth retrying soon: a member's view settles within its
 * heartbeat, and an owner's death is seen within the TTL. */
#define RETRY_AFTER "Retry-After: 1\r\n"

static const char *const VERB_NAMES[EPHD_CELL_VERBS] = {"push", "pop", "ack"};

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
static uint64_t forwarded[EPHD_CELL_VERBS][N_OUTCOMES];

static const char *token;
/* A relayed push or ack is answered by its owner at once: this bounds the
 * wait for a peer that accepted the connection and does not answer (a
 * stopped process, a full loop). Past it the client hears
 * ephemeral_forward_failed, well within any client's own timeout. */
static uint64_t answer_timeout_ms;
static ephd_relay_refund_fn refund;
static size_t relayed_batch_bytes = SIZE_MAX;

void ephd_relay_init(const char *cell_token, uint64_t timeout_ms,
                     size_t batch_bytes, ephd_relay_refund_fn fn) {
  relayed_batch_bytes = batch_bytes;
  token = cell_token;
  answer_timeout_ms = timeout_ms;
  refund = fn;
}

int ephd_relay_enabled(void) { return token != NULL; }

uint64_t ephd_relay_timeout_ms(void) { return answer_timeout_ms; }

int ephd_relay_sends_on(const ephd_request_t *req) {
  return token != NULL && req->forward.len == 0;
}

size_t ephd_relay_batch_bytes(const ephd_request_t *req) {
  return req->forward.len ? relayed_batch_bytes : SIZE_MAX;
}

/* One relayed request: what a second send needs (the request's own bytes
 * live only during its dispatch), in one allocation, which is the only
 * copy of its body (the relay writes it from here) and is counted as the
 * client's bytes while held (ephd_deferred_account), its answer too while
 * the relay reads it: a slow owner holds the client budget, not memory
 * nobody bounds. */
typedef struct {
  ephd_deferred_t *deferred;
  ephd_peer_call_t *relay; /* NULL while no send is pending */
  ephd_peer_t *peer;       /* the member it was last sent to */
  ephd_cell_verb_t verb;
  int rehashed;
  int parks;           /* a pop that waits: the relay's parking lane */
  int commits;         /* a pop that commits on delivery (delivery.h) */
  uint32_t taken;      /* the rate a push was charged at this edge */
  uint64_t timeout_ms; /* the relay's deadline for each send */
  uint64_t owner;      /* the member it was last sent to, by id */
  size_t size;         /* of the allocation */
  size_t target_len, headers_len, body_len, tenant_len, queue_len,
      partition_len, group_len;
  char bytes[]; /* target, headers (signed at each send), body, tenant,
                   queue, partition, group */
} forward_t;

static char *f_headers(forward_t *f) { return f->bytes + f->target_len; }
static const char *f_body(const forward_t *f) {
  return f->bytes + f->target_len + f->headers_len;
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
static const char *f_group(const forward_t *f) {
  return f_partition(f) + f->partition_len;
}

static void on_answer(void *data, int result, const ephd_peer_response_t *res);
static void on_released(void *data);

/* s may be NULL when n is 0 (a pop's body, a group not named), which
 * memcpy may not be given. */
static char *put(char *p, const char *s, size_t n) {
  if (n) memcpy(p, s, n);
  return p + n;
}

static const char MARKED_CT[] = "Content-Type: application/json\r\n";

/* The owner's answer, as the relay reads it, is the client's too. */
static void on_answer_bytes(void *data, size_t bytes) {
  forward_t *f = data;
  if (f->deferred) ephd_deferred_account(f->deferred, f->size + bytes);
}

/* FNV-1a: cheap, and good enough to spread names over a few lines. */
static uint64_t fnv(uint64_t h, const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}
#define FNV_BASIS 14695981039346656037ull

/* A push or an ack goes on the owner's pipe its partition chooses (one
 * partition's requests stay in order); a pop keeps a connection of its own,
 * as its answer may be large or wait. */
static uint32_t pipe_key(const forward_t *f) {
  if (f->verb == EPHD_CELL_POP) return 0;
  uint64_t k = fnv(FNV_BASIS, f_queue(f), f->queue_len);
  k = fnv(k ^ 0xff, f_partition(f), f->partition_len);
  return (uint32_t)(k ^ (k >> 32)) | 1u;
}

/* Sends f to owner, its headers written again (another owner's rehash
 * reuses them). */
static int send_to(forward_t *f, const ephd_member_t *owner) {
  ephd_peer_t *peer = ephd_peer(owner->address);
  if (peer == NULL) return EPHD_PEER_E_INVALID;
  ephd_slice_t method = f->verb == EPHD_CELL_POP ? (ephd_slice_t){"GET", 3}
                                                 : (ephd_slice_t){"POST", 4};
  char *h = ephd_mark_write(f_headers(f), f_tenant(f), f->tenant_len);
  if (f->body_len) put(h, MARKED_CT, sizeof(MARKED_CT) - 1);
  ephd_peer_request_t rq = {
      .method = method,
      .target = {f->bytes, f->target_len},
      .headers = {f_headers(f), f->headers_len},
      .body = {f_body(f), f->body_len},
      .timeout_ms = f->timeout_ms,
      .parks = f->parks,
      .borrows = 1,
      .answer_bytes = on_answer_bytes,
      .key = pipe_key(f),
      .share = f->parks ? ephd_relay_share(f_tenant(f), f->tenant_len) : 0,
      .release = on_released,
  };
  f->owner = owner->id;
  f->peer = peer;
  return ephd_peer_send(peer, &rq, on_answer, f, &f->relay);
}

static void refuse(ephd_conn_t *c, ephd_code_t code, const char *message) {
  ephd_error_write(
      ephd_http_begin_error(c, code, ephd_code_status(code), RETRY_AFTER), code,
      message);
  ephd_http_end(c);
}

uint64_t ephd_relay_share(const char *tenant, size_t len) {
  return fnv(FNV_BASIS, tenant, len) | 1;
}

void ephd_relay_share_refused(ephd_conn_t *c) {
  refuse(c, EPHD_CODE_RATE_LIMITED,
         "the tenant has its whole share of relayed waiting pops to the "
         "partition's owner in use (QUEEN_EPHEMERAL_RELAY_TENANT_PARKED)");
}

static void fail(ephd_conn_t *c, int kind) {
  char message[160];
  snprintf(message, sizeof(message),
           "the partition's owner could not be reached (%s); retry soon",
           ephd_peer_kind_name(kind));
  refuse(c, EPHD_CODE_EPHEMERAL_FORWARD_FAILED, message);
}

/* Whether the owner's answer is one an ephd broker gives: a status of the
 * list (lua/ephd/codes.lua) and a JSON body. Anything else (a proxy's 502
 * page, a 999, a 204) came from something else on the way, and the client
 * hears the taxonomy's ephemeral_forward_failed, not a stranger's answer. */
static int is_ephd_answer(const ephd_peer_response_t *res) {
  static const char json[] = "application/json";
  return ephd_status_index(res->status) < EPHD_STATUS_COUNT &&
         res->content_type.len == sizeof(json) - 1 &&
         memcmp(res->content_type.ptr, json, sizeof(json) - 1) == 0;
}

static int says_owner_moved(const ephd_peer_response_t *res) {
  static const char code[] = "\"code\":\"owner_moved\"";
  return res->status == 503 &&
         memmem(res->body.ptr, res->body.len, code, sizeof(code) - 1) != NULL;
}

/* The advertised address of the member that answered (by id): in this
 * broker's view, or live by its last read (one an owner_moved named
 * before this broker probed it), and when its address can be a header's
 * value; NULL otherwise. A few members to look at, once per relayed
 * answer: nothing is kept per request for it. */
static const char *owner_address(uint64_t id) {
  const ephd_view_t *v = ephd_members_view();
  const ephd_member_t *m = NULL;
  for (uint32_t i = 0; i < v->count && m == NULL; i++)
    if (v->members[i].id == id) m = &v->members[i];
  if (m == NULL && (m = ephd_members_live(id)) == NULL) return NULL;
  for (const char *p = m->address; *p; p++)
    if (*p <= ' ' || *p > '~') return NULL;
  return m->address[0] ? m->address : NULL;
}

/* The owner's answer (one is_ephd_answer accepts): status, Retry-After
 * when it is a number of seconds, and body; and, unless it is owner_moved
 * (the member did not serve it), the owner hint: X-Queen-Owner-Address,
 * the address of the member that served it, for a client that routes
 * itself to owners (docs/client.md). Only a relayed answer carries it: a
 * direct one's owner is the broker the client asked, and its hot path
 * pays nothing. It is not X-Queen-Owner, the member id an owner_moved
 * names for its edge alone. */
static void pass_back(ephd_conn_t *c, const ephd_peer_response_t *res,
                      uint64_t owner) {
  static const char RA[] = "Retry-After: ", OA[] = "X-Queen-Owner-Address: ";
  char extra[64 + 32 + EPHD_MEMBER_ADDRESS_MAX];
  char *at = extra;
  size_t n = res->retry_after.len;
  int seconds = n > 0 && n <= 10;
  for (size_t i = 0; seconds && i < n; i++)
    seconds = res->retry_after.ptr[i] >= '0' && res->retry_after.ptr[i] <= '9';
  /* Put together by hand: this runs for every relayed answer. */
  if (seconds) {
    at = put(at, RA, sizeof(RA) - 1);
    at = put(at, res->retry_after.ptr, n);
    at = put(at, "\r\n", 2);
  }
  const char *address = says_owner_moved(res) ? NULL : owner_address(owner);
  if (address) {
    at = put(at, OA, sizeof(OA) - 1);
    at = put(at, address, strnlen(address, EPHD_MEMBER_ADDRESS_MAX - 1));
    at = put(at, "\r\n", 2);
  }
  *at = 0;
  ephd_buf_t *o = ephd_http_begin(c, res->status, at > extra ? extra : NULL);
  ephd_buf_append(o, res->body.ptr, res->body.len);
  ephd_http_end(c);
}

/* The member an owner_moved names (X-Queen-Owner), when this broker read
 * its row live; NULL otherwise. */
static const ephd_member_t *named_owner(const ephd_peer_response_t *res) {
  char id[17];
  if (res->owner.len != 16) return NULL;
  memcpy(id, res->owner.ptr, 16);
  id[16] = 0;
  char *end;
  uint64_t v = strtoull(id, &end, 16);
  if (*end != 0 || id[0] == '-' || id[0] == '+' || id[0] == ' ') return NULL;
  return ephd_members_live(v);
}

/* owner_moved: the owner's view and ours differ. Once, and only when our
 * own view now names another member than the one asked, send there;
 * otherwise (the same owner) the client has the 503 and its Retry-After.
 * An owner that is now this broker is sent to as any other, through its
 * own listener: the request's operation here was read for a relay and is
 * spent, and the marked copy is served as a member's relay is (its ladder
 * already run, its rate already charged), so the client sees one answer. */
static int rehash(forward_t *f, const ephd_peer_response_t *res) {
  /* An ack went where its ids' epoch said, which no view changes. */
  if (f->rehashed || f->verb == EPHD_CELL_ACK) return 0;
  const ephd_view_t *v = ephd_members_view();
  const ephd_member_t *owner =
      v->count > 1
          ? ephd_placement_owner(v, f_tenant(f), f->tenant_len, f_queue(f),
                                 f->queue_len, f_partition(f), f->partition_len)
          : &v->members[v->self];
  /* The same member by this view: the one the answer names, when this
   * broker read its row live (a member that joined, not probed here yet). */
  if (owner->id == f->owner) owner = named_owner(res);
  if (owner == NULL || owner->id == f->owner) return 0;
  f->rehashed = 1;
  return send_to(f, owner) == 0;
}

/* A pop that commits on delivery, answered: its batch was leased at the
 * owner and is acked there now that the client's answer is written. */
static void commit(forward_t *f, const ephd_peer_response_t *res) {
  ephd_buf_t ids;
  ephd_buf_init(&ids);
  uint32_t count;
  int ready;
  if (ephd_delivery_read(res, &ids, &count, &ready) == 0 && count > 0)
    ephd_delivery_ack(f->peer, f_tenant(f), f->tenant_len, f_queue(f),
                      f->queue_len, f->group_len ? f_group(f) : NULL,
                      f->group_len, &ids, answer_timeout_ms);
  ephd_buf_free(&ids);
}

static void on_answer(void *data, int result, const ephd_peer_response_t *res) {
  forward_t *f = data;
  f->relay = NULL;
  if (result == EPHD_PEER_OK && !is_ephd_answer(res))
    result = EPHD_PEER_E_MALFORMED;
  if (result == EPHD_PEER_OK && says_owner_moved(res) && rehash(f, res)) {
    forwarded[f->verb][OUT_REHASHED]++;
    return;
  }
  ephd_conn_t *c = ephd_deferred_conn(f->deferred);
  if (result == EPHD_PEER_OK) {
    forwarded[f->verb][OUT_ANSWERED]++;
    pass_back(c, res, f->owner);
    /* The owner refused it and appended nothing: as when a rung here
     * refuses a push, the rate it took is given back. */
    if (f->taken && (res->status < 200 || res->status > 299) && refund)
      refund(f_tenant(f), f->tenant_len, f->taken);
    if (f->commits && res->status == 200) commit(f, res);
  } else {
    forwarded[f->verb][OUT_FAILED]++;
    fail(c, result);
  }
  free(f);
}

/* A cancelled relay's body, written to its owner after its client left,
 * is no longer read. */
static void on_released(void *data) { free(data); }

static void on_cancel(void *data) {
  forward_t *f = data;
  forwarded[f->verb][OUT_CANCELLED]++;
  /* Its body still being written on the owner's pipe: the request is kept
   * until that write is over (on_released), rather than the pipe dropped
   * with the other clients' pushes the owner has read on it. */
  if (f->relay && ephd_peer_cancel(f->relay)) return;
  free(f);
}

/* The broker stops. A relay that does not park is let finish: its owner
 * answers within the relay's deadline, and the client hears that answer
 * rather than a failure for a push its owner may have applied (the stop
 * waits for it: ephd_peer_drain). A waiting pop is cut short as a local
 * one is, with an empty batch, and its relay cancelled: whatever the owner
 * took for it meanwhile was leased (delivery.h), and is redelivered. */
static void on_stop(void *data) {
  forward_t *f = data;
  if (!f->parks) return;
  if (f->relay) ephd_peer_cancel(f->relay);
  forwarded[f->verb][OUT_STOPPED]++;
  ephd_pop_answer_empty(ephd_deferred_conn(f->deferred), f_queue(f),
                        f->queue_len);
  free(f);
}

static const ephd_deferred_ops_t FORWARDED = {
    .deadline = NULL, /* the relay's own deadline ends every send */
    .cancel = on_cancel,
    .stop = on_stop,
};

size_t ephd_relay_marked_size(const ephd_request_t *req, size_t tenant_len,
                              const char *extra_query, ephd_marked_t *m) {
  size_t extra = extra_query ? 1 + strlen(extra_query) : 0;
  m->target_len =
      req->path.len + (req->query.len ? 1 + req->query.len : 0) + extra;
  m->headers_len =
      (req->body.len ? sizeof(MARKED_CT) - 1 : 0) + ephd_mark_size(tenant_len);
  m->body_len = req->body.len;
  return m->target_len + m->headers_len + m->body_len;
}

/* The target as sent: path, query without the parameters drop names
 * (NULL: none), and extra_query after them. */
static char *write_target(char *p, const ephd_request_t *req,
                          int (*drop)(const char *k, size_t n),
                          const char *extra_query) {
  p = put(p, req->path.ptr, req->path.len);
  char *query = p;
  p = ephd_delivery_query(p, req->query, 1, drop);
  if (extra_query) {
    char sep = p > query ? '&' : '?';
    *p++ = sep;
    p = put(p, extra_query, strlen(extra_query));
  }
  return p;
}

char *ephd_relay_write_marked(char *p, const ephd_request_t *req,
                              const char *extra_query, const char *tenant,
                              size_t tenant_len) {
  p = write_target(p, req, NULL, extra_query);
  if (req->body.len) p = put(p, MARKED_CT, sizeof(MARKED_CT) - 1);
  p = ephd_mark_write(p, tenant, tenant_len);
  return put(p, req->body.ptr, req->body.len);
}

/* The request as it will be sent again (its headers written at each
 * send), and the key placement hashed. */
static forward_t *forward_new(const ephd_request_t *req, ephd_cell_verb_t verb,
                              uint64_t park_ms, uint32_t taken,
                              const char *tenant, size_t tenant_len,
                              ephd_slice_t queue, ephd_slice_t partition) {
  /* A waiting pop that named no timeout parks at its owner for this
   * broker's default, which its deadline here was set from: the owner's
   * own default may be another, and outlast the deadline. */
  char timeout[32];
  const char *extra = NULL;
  const ephd_pop_args_t *a = &ephd_op_of(req)->pub.pop;
  if (verb == EPHD_CELL_POP && park_ms && !a->timeout_given) {
    snprintf(timeout, sizeof(timeout), "timeout=%" PRIu64, park_ms);
    extra = timeout;
  }
  int commits = verb == EPHD_CELL_POP && a->auto_ack;
  size_t group_len = commits && a->group ? a->group_len : 0;
  /* What the scan here found, so the owner need not scan the body again. */
  char frame[EPHD_FRAME_LINE_MAX];
  size_t frame_len = verb == EPHD_CELL_PUSH ? ephd_scan_frame(req, frame) : 0;
  ephd_marked_t m;
  size_t n = ephd_relay_marked_size(req, tenant_len, extra, &m) + frame_len +
             tenant_len + queue.len + partition.len + group_len;
  forward_t *f = malloc(sizeof(*f) + n);
  if (f == NULL) return NULL;
  f->deferred = NULL;
  f->relay = NULL;
  f->peer = NULL;
  f->verb = verb;
  f->rehashed = 0;
  f->parks = park_ms > 0;
  f->commits = commits;
  f->taken = taken;
  f->timeout_ms = park_ms ? park_ms + PARK_MARGIN_MS : answer_timeout_ms;
  f->size = sizeof(*f) + n;
  /* A pop that commits on delivery is sent without it: leased there,
   * acked once answered here (delivery.h). */
  char *p = write_target(f->bytes, req, commits ? ephd_delivery_commits : NULL,
                         extra);
  f->target_len = (size_t)(p - f->bytes);
  f->headers_len = m.headers_len + frame_len;
  f->body_len = m.body_len;
  f->tenant_len = tenant_len;
  f->queue_len = queue.len;
  f->partition_len = partition.len;
  f->group_len = group_len;
  /* The mark and Content-Type go before the frame at each send. */
  p = put(p + m.headers_len, frame, frame_len);
  p = put(p, req->body.ptr, req->body.len);
  p = put(p, tenant, tenant_len);
  p = put(p, queue.ptr, queue.len);
  p = put(p, partition.ptr, partition.len);
  put(p, a->group, group_len);
  return f;
}

/* Holds the request for f, its bytes counted as its client's. */
static void hold(const ephd_request_t *req, forward_t *f) {
  f->deferred = ephd_http_defer(req, &FORWARDED, f);
  ephd_deferred_account(f->deferred, f->size);
}

int ephd_relay_owner_moved(const ephd_request_t *req, ephd_cell_verb_t verb,
                           const ephd_member_t *owner) {
  forwarded[verb][OUT_MOVED]++;
  char extra[64];
  snprintf(extra, sizeof(extra),
           RETRY_AFTER "X-Queen-Owner: %016" PRIx64 "\r\n", owner->id);
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_code_t code = EPHD_CODE_OWNER_MOVED;
  ephd_error_write(
      ephd_http_begin_error(c, code, ephd_code_status(code), extra), code,
      "this broker does not own the partition; retry soon");
  ephd_http_end(c);
  return EPHD_RELAYED;
}

int ephd_relay_to(const ephd_request_t *req, ephd_cell_verb_t verb,
                  const ephd_member_t *owner, uint64_t park_ms, uint32_t taken,
                  const char *tenant, size_t tenant_len, ephd_slice_t queue,
                  ephd_slice_t partition) {
  /* A hand-over of the partition still here goes first, so the owner
   * merges it before serving this. */
  if (verb != EPHD_CELL_ACK)
    ephd_handover_flush(tenant, tenant_len, queue.ptr, queue.len, partition.ptr,
                        partition.len);
  forward_t *f = forward_new(req, verb, park_ms, taken, tenant, tenant_len,
                             queue, partition);
  int rc = f ? send_to(f, owner) : EPHD_PEER_E_INVALID;
  if (rc != 0) {
    free(f);
    if (rc == EPHD_PEER_E_SHARE) {
      ephd_relay_share_refused(ephd_http_conn(req));
      return EPHD_RELAYED;
    }
    forwarded[verb][OUT_FAILED]++;
    fail(ephd_http_conn(req), rc);
    return EPHD_RELAYED;
  }
  hold(req, f);
  return EPHD_RELAYED;
}

/* An ack split over the cell: its ids by holder, the parts sent at once,
 * the answer written when the last part is in. One allocation: the split,
 * its parts, its ids' places and outcomes, and the ids' bytes. */
typedef struct ack_split ack_split_t;

typedef struct {
  ack_split_t *split;
  ephd_peer_call_t *relay; /* NULL once answered, or never sent */
  size_t bytes;            /* its request, which the relay keeps meanwhile */
} ack_part_t;

typedef struct {
  uint32_t off, len; /* in the split's bytes */
  uint32_t part;     /* HERE, or the part holding it */
  ephd_outcome_t outcome;
} ack_id_t;

#define HERE EPHD_RELAY_HERE

struct ack_split {
  ephd_deferred_t *deferred;
  uint32_t count, parts, pending;
  int served;  /* ids settled here, or a part answered with its results */
  int failure; /* the first part's relay failure, for a 503 */
  ack_part_t *part;
  ack_id_t *id;
  char *bytes;
  /* The split's allocation and its parts still out: its client's bytes,
   * as a relayed request's (ephd_deferred_account). */
  size_t held;
};

/* Every id's outcome in the request's order; a 503 when nothing of the ack
 * was applied anywhere (no id here, no part reached), which the client can
 * retry whole. */
static void split_answer(ephd_conn_t *c, ack_split_t *sp) {
  if (!sp->served) {
    fail(c, sp->failure);
    return;
  }
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"results\":[");
  for (uint32_t i = 0; i < sp->count; i++)
    ephd_ack_write_result(out, i == 0, sp->bytes + sp->id[i].off, sp->id[i].len,
                          sp->id[i].outcome);
  ephd_buf_appends(out, "]}");
  ephd_http_end(c);
}

/* One result, {"id":..,"outcome":..}, at *p: its outcome, or -1. */
static int outcome_of(const char **p, const char *end, ephd_buf_t *scratch,
                      ephd_outcome_t *outcome) {
  const char *s = *p;
  if (s >= end || *s++ != '{') return -1;
  int first = 1, named = 0, m;
  ephd_slice_t key;
  while ((m = ephd_json_member(&s, end, scratch, &key, &first)) == 1) {
    const char *v = s;
    if ((s = ephd_json_skip(s, end)) == NULL) return -1;
    if (key.len == 7 && memcmp(key.ptr, "outcome", 7) == 0 && *v == '"' &&
        ephd_ack_outcome_named(v + 1, (size_t)(s - v - 2), outcome) == 0)
      named = 1;
  }
  *p = s;
  return m == 0 && named ? 0 : -1;
}

int ephd_relay_ack_outcomes(const char *body, size_t len, ephd_outcome_t *out,
                            uint32_t n) {
  const char *p = body, *end = body + len;
  ephd_buf_t scratch;
  ephd_buf_init(&scratch);
  ephd_slice_t key;
  int first = 1, got = 0, m;
  uint32_t i = 0;
  p = ephd_json_ws(p, end);
  if (p >= end || *p++ != '{') goto fail;
  while ((m = ephd_json_member(&p, end, &scratch, &key, &first)) == 1) {
    if (key.len != 7 || memcmp(key.ptr, "results", 7) != 0) {
      if ((p = ephd_json_skip(p, end)) == NULL) goto fail;
      continue;
    }
    if (got || p >= end || *p++ != '[') goto fail;
    got = 1;
    p = ephd_json_ws(p, end);
    if (p < end && *p == ']') {
      p++;
      continue;
    }
    for (;;) {
      if (i == n || outcome_of(&p, end, &scratch, &out[i++]) != 0) goto fail;
      p = ephd_json_ws(p, end);
      if (p >= end) goto fail;
      if (*p == ']') break;
      if (*p++ != ',') goto fail;
      p = ephd_json_ws(p, end);
    }
    p++;
  }
  ephd_buf_free(&scratch);
  return m == 0 && got && i == n ? 0 : -1;
fail:
  ephd_buf_free(&scratch);
  return -1;
}

/* Part k's results into its ids' outcomes: 0, or -1 when they are not
 * one per id sent. */
static int merge(ack_split_t *sp, uint32_t k, const char *body, size_t len) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < sp->count; i++) n += sp->id[i].part == k;
  ephd_outcome_t *got = malloc(n * sizeof(*got));
  int rc = got ? ephd_relay_ack_outcomes(body, len, got, n) : -1;
  for (uint32_t i = 0, j = 0; rc == 0 && i < sp->count; i++)
    if (sp->id[i].part == k) sp->id[i].outcome = got[j++];
  free(got);
  return rc;
}

/* Part k's answer into its ids' outcomes: its results, or stale for each,
 * the loss contract's answer for an id whose holder did not say (it could
 * not be reached, or refused the part: nothing of it was applied, unless a
 * deadline passed after the owner read it). */
static void part_done(ack_split_t *sp, uint32_t k, int result,
                      const ephd_peer_response_t *res) {
  if (result == EPHD_PEER_OK && res->status == 200 &&
      merge(sp, k, res->body.ptr, res->body.len) == 0) {
    sp->served = 1;
    return;
  }
  if (result == EPHD_PEER_OK)
    sp->served = 1; /* it answered: the client hears its ids' outcome */
  else if (sp->failure == 0)
    sp->failure = result;
  for (uint32_t i = 0; i < sp->count; i++)
    if (sp->id[i].part == k) sp->id[i].outcome = EPHD_OUTCOME_STALE;
}

static void on_part_answer(void *data, int result,
                           const ephd_peer_response_t *res) {
  ack_part_t *part = data;
  ack_split_t *sp = part->split;
  part->relay = NULL;
  sp->held -= part->bytes;
  forwarded[EPHD_CELL_ACK]
           [result == EPHD_PEER_OK ? OUT_ANSWERED : OUT_FAILED]++;
  part_done(sp, (uint32_t)(part - sp->part), result, res);
  if (--sp->pending == 0) {
    split_answer(ephd_deferred_conn(sp->deferred), sp);
    free(sp);
  } else {
    ephd_deferred_account(sp->deferred, sp->held);
  }
}

/* The client left: the parts still out are dropped. */
static void on_split_cancel(void *data) {
  ack_split_t *sp = data;
  for (uint32_t k = 0; k < sp->parts; k++)
    if (sp->part[k].relay) {
      ephd_peer_cancel(sp->part[k].relay);
      forwarded[EPHD_CELL_ACK][OUT_CANCELLED]++;
    }
  free(sp);
}

static void on_split_stop(void *data) {
  (void)data; /* the broker stops: its parts finish, as a relay does */
}

static const ephd_deferred_ops_t SPLIT = {
    .deadline = NULL, /* each part's relay has its own deadline */
    .cancel = on_split_cancel,
    .stop = on_split_stop,
};

static const char *const STATUS_NAMES[] = {"completed", "failed", "retry"};

/* Part k's body: the ack's queue and group, and its ids with their
 * statuses (an error string is ignored by every broker: not sent). */
static void part_body(ephd_buf_t *b, const ephd_scan_t *scan,
                      const ephd_ack_item_t *acks, const ack_split_t *sp,
                      uint32_t k) {
  ephd_buf_appends(b, "{\"queue\":");
  ephd_json_write_string(b, scan->queue.ptr, scan->queue.len);
  if (scan->has_group) {
    ephd_buf_appends(b, ",\"group\":");
    ephd_json_write_string(b, scan->group.ptr, scan->group.len);
  }
  ephd_buf_appends(b, ",\"acks\":[");
  int first = 1;
  for (uint32_t i = 0; i < sp->count; i++) {
    if (sp->id[i].part != k) continue;
    ephd_buf_appends(b, first ? "{\"id\":" : ",{\"id\":");
    first = 0;
    ephd_json_write_string(b, sp->bytes + sp->id[i].off, sp->id[i].len);
    ephd_buf_appends(b, ",\"status\":\"");
    ephd_buf_appends(b, STATUS_NAMES[acks[i].status]);
    ephd_buf_appends(b, "\"}");
  }
  ephd_buf_appends(b, "]}");
}

static ack_split_t *split_new(const ephd_view_t *view, const uint32_t *holder,
                              const ephd_ack_item_t *acks, const char *ids,
                              uint32_t count, uint32_t *member_of_part) {
  size_t bytes = 0;
  for (uint32_t i = 0; i < count; i++) bytes += acks[i].len;
  uint32_t parts = view->count - 1;
  size_t size = sizeof(ack_split_t) + parts * sizeof(ack_part_t) +
                count * sizeof(ack_id_t) + bytes;
  ack_split_t *sp = malloc(size);
  if (sp == NULL) return NULL;
  sp->held = size;
  sp->part = (ack_part_t *)(sp + 1);
  sp->id = (ack_id_t *)(sp->part + parts);
  sp->bytes = (char *)(sp->id + count);
  sp->count = count;
  sp->parts = 0;
  sp->pending = 0;
  sp->served = 0;
  sp->failure = 0;
  /* Parts numbered in order of first appearance; member_of_part maps back. */
  uint32_t part_of_member[view->count];
  for (uint32_t m = 0; m < view->count; m++) part_of_member[m] = HERE;
  size_t off = 0;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t m = holder[i];
    if (m != HERE && part_of_member[m] == HERE) {
      member_of_part[sp->parts] = m;
      part_of_member[m] = sp->parts++;
    }
    ack_id_t *id = &sp->id[i];
    id->off = (uint32_t)off;
    id->len = acks[i].len;
    id->part = m == HERE ? HERE : part_of_member[m];
    id->outcome = EPHD_OUTCOME_STALE;
    memcpy(sp->bytes + off, ids + acks[i].off, acks[i].len);
    off += acks[i].len;
  }
  return sp;
}

/* A part's headers: a JSON body, and the mark. */
static void mark_headers(ephd_buf_t *b, const char *tenant, size_t tenant_len) {
  b->len = 0;
  ephd_buf_appends(b, MARKED_CT);
  char *at = ephd_buf_reserve(b, ephd_mark_size(tenant_len));
  b->len = (size_t)(ephd_mark_write(at, tenant, tenant_len) - b->base);
}

int ephd_relay_ack_split(const ephd_request_t *req, const ephd_view_t *view,
                         const uint32_t *holder, const char *tenant,
                         size_t tenant_len, const ephd_scan_t *scan,
                         const ephd_ack_item_t *acks, const char *ids,
                         ephd_relay_ack_here_fn here, void *data) {
  uint32_t member_of_part[view->count];
  ack_split_t *sp =
      split_new(view, holder, acks, ids, scan->count, member_of_part);
  ephd_conn_t *c = ephd_http_conn(req);
  if (sp == NULL) {
    fail(c, EPHD_PEER_E_INVALID);
    return EPHD_RELAYED;
  }
  /* This broker's own ids first: nothing of theirs waits on a peer. */
  for (uint32_t i = 0; i < sp->count; i++)
    if (sp->id[i].part == HERE) {
      sp->id[i].outcome = here(data, i);
      sp->served = 1;
    }
  ephd_buf_t headers, body;
  ephd_buf_init(&headers);
  ephd_buf_init(&body);
  for (uint32_t k = 0; k < sp->parts; k++) {
    ack_part_t *part = &sp->part[k];
    part->split = sp;
    part->relay = NULL;
    part->bytes = 0;
    body.len = 0;
    part_body(&body, scan, acks, sp, k);
    mark_headers(&headers, tenant, tenant_len);
    ephd_peer_t *peer = ephd_peer(view->members[member_of_part[k]].address);
    ephd_peer_request_t rq = {
        .method = {"POST", 4},
        .target = req->path,
        .headers = {headers.base, headers.len},
        .body = {body.base, body.len},
        .timeout_ms = answer_timeout_ms,
    };
    int rc = peer
                 ? ephd_peer_send(peer, &rq, on_part_answer, part, &part->relay)
                 : EPHD_PEER_E_INVALID;
    if (rc == 0) {
      part->bytes = headers.len + body.len;
      sp->held += part->bytes;
      sp->pending++;
    } else {
      forwarded[EPHD_CELL_ACK][OUT_FAILED]++;
      part_done(sp, k, rc, NULL);
    }
  }
  ephd_buf_free(&headers);
  ephd_buf_free(&body);
  if (sp->pending == 0) {
    /* Every part refused at once: answered now, nothing held. */
    split_answer(c, sp);
    free(sp);
    return EPHD_RELAYED;
  }
  sp->deferred = ephd_http_defer(req, &SPLIT, sp);
  ephd_deferred_account(sp->deferred, sp->held);
  return EPHD_RELAYED;
}

int ephd_ffi_forward_tenant(const ephd_request_t *req, ephd_slice_t *tenant) {
  if (token == NULL) return EPHD_E_REFUSED;
  if (!ephd_http_peer(req)) {
    if (ephd_mark_session_open(req->session, req->host) != 0)
      return EPHD_E_REFUSED;
    ephd_http_trust_peer(req);
  }
  int rc = ephd_mark_tenant(req->forward, tenant);
  /* The mark believed, so is the scan's frame the member sent with it. */
  if (rc == EPHD_OK) ephd_op_of(req)->frame = ephd_http_scan_frame(req);
  return rc;
}

/* The pops naming no partition that whole_pop.c served over the cell, by
 * how each ended: route="pop_whole" of the same family. */
static const char *const WHOLE_NAMES[EPHD_WHOLE_OUTCOMES] = {
    "answered", "failed", "cancelled", "stopped"};
static uint64_t whole_pops[EPHD_WHOLE_OUTCOMES];

void ephd_relay_count_whole_pop(ephd_whole_outcome_t outcome) {
  whole_pops[outcome]++;
}

void ephd_relay_metrics(ephd_buf_t *o) {
  const char *name = "queen_ephemeral_forwarded_total";
  ephd_prom_family(o, name, "counter",
                   "Requests relayed to their partition's owner, and marked "
                   "ones received for a partition not owned (owner_moved), "
                   "by route and outcome.");
  ephd_prom_grid(o, name, "route", VERB_NAMES, EPHD_CELL_VERBS, "outcome",
                 OUTCOME_NAMES, N_OUTCOMES, &forwarded[0][0]);
  static const char *const whole[] = {"pop_whole"};
  ephd_prom_grid(o, name, "route", whole, 1, "outcome", WHOLE_NAMES,
                 EPHD_WHOLE_OUTCOMES, whole_pops);
  const ephd_peer_stats_t *s = ephd_peer_stats();
  const char *seconds = "queen_ephemeral_relay_seconds";
  ephd_prom_family(o, seconds, "histogram",
                   "Seconds from a request's send to a peer broker (relayed, "
                   "or an admin verb fanned out) to its whole answer.");
  char labels[48];
  uint64_t cum = 0;
  for (int b = 0; b <= EPHD_PEER_LATENCY_BUCKETS; b++) {
    cum += s->latency_buckets[b];
    if (b < EPHD_PEER_LATENCY_BUCKETS)
      snprintf(labels, sizeof(labels), "{le=\"%g\"}",
               (double)ephd_peer_latency_bounds_ns[b] / 1e9);
    else
      snprintf(labels, sizeof(labels), "{le=\"+Inf\"}");
    ephd_prom_sample(o, "queen_ephemeral_relay_seconds_bucket", labels, cum);
  }
  char sum[64];
  snprintf(sum, sizeof(sum), "queen_ephemeral_relay_seconds_sum %.6f\n",
           (double)s->latency_ns_sum / 1e9);
  ephd_buf_appends(o, sum);
  ephd_prom_sample(o, "queen_ephemeral_relay_seconds_count", "",
                   s->latency_count);
  /* Their ratio is the pipes' batching: requests a write carries. */
  ephd_prom_family(o, "queen_ephemeral_relay_pipelined_total", "counter",
                   "Requests relayed on the pipes (pushes and acks), each "
                   "written with the others of its loop turn.");
  ephd_prom_sample(o, "queen_ephemeral_relay_pipelined_total", "",
                   s->pipelined);
  ephd_prom_family(o, "queen_ephemeral_relay_pipe_writes_total", "counter",
                   "The writes that carried the pipes' requests.");
  ephd_prom_sample(o, "queen_ephemeral_relay_pipe_writes_total", "",
                   s->pipe_writes);
}
