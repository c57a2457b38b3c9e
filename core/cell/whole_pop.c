/* A pop naming no partition, over the whole cell: see whole_pop.h. */
#include "whole_pop.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "commands.h"
#include "errors.h"
#include "http.h"
#include "json.h"
#include "mark.h"
#include "op.h"
#include "peer_client.h"
#include "relay_edge.h"

/* A notify parks for what is left of the pop's timeout: its relay's
 * deadline is that plus this margin for the way there and back, as a
 * relayed parked pop's (relay_edge.c). */
#define PARK_MARGIN_MS 2000
/* Where each (tenant, queue, group) starts its turn among the members: a
 * counter per hash bucket, no allocation; two queues sharing a bucket
 * still each move on at every pop of either. */
#define TURNS 256
static uint32_t turns[TURNS];

static const char POP_PATH[] = "/api/v1/ephemeral/pop";
static const char ACK_PATH[] = "/api/v1/ephemeral/ack";
static const char JSON_CT[] = "Content-Type: application/json\r\n";

typedef struct whole whole_t;

/* One member's request in flight for the pop. */
typedef struct {
  whole_t *w;
  ephd_peer_call_t *call; /* NULL: none */
  uint32_t member;
} ask_t;

enum { SWEEP, NOTIFY, TAKE };

struct whole {
  ephd_deferred_t *deferred;
  uint32_t n;       /* members in the view at the pop */
  uint32_t next;    /* the sweep's next member */
  uint32_t left;    /* members the sweep has still to ask */
  uint32_t pending; /* notifies out */
  int phase;
  int waits, auto_ack;
  int heard; /* some member answered the pop (empty or not) */
  uint64_t deadline_ms;
  size_t size;        /* of the allocation */
  ephd_peer_t **peer; /* [n], NULL where the address does not parse */
  ask_t *ask;         /* [n] */
  size_t tenant_len, queue_len, group_len, base_len;
  char *tenant, *queue, *group; /* group NULL: queue mode */
  char *base; /* the pop's target without wait, timeout, notify, autoAck */
};

static uint32_t turn_of(const char *tenant, size_t tenant_len,
                        const ephd_pop_args_t *a) {
  uint32_t h = 2166136261u; /* FNV-1a */
  const char *parts[3] = {tenant, a->queue, a->group};
  size_t lens[3] = {tenant_len, a->queue_len, a->group ? a->group_len : 0};
  for (int i = 0; i < 3; i++) {
    for (size_t j = 0; j < lens[i]; j++)
      h = (h ^ (unsigned char)parts[i][j]) * 16777619u;
    h = (h ^ 0xff) * 16777619u;
  }
  return turns[h % TURNS]++;
}

/* Whether a query's parameter is one the edge sets itself at each send
 * (a client's own would be a repeated parameter there). A key spelled
 * with escapes is not recognised and comes back as that 400. */
static int edge_sets(const char *k, size_t n) {
  static const char *const names[] = {"wait", "timeout", "notify",
                                      "commitOnDelivery", "autoAck"};
  for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
    if (strlen(names[i]) == n && memcmp(names[i], k, n) == 0) return 1;
  return 0;
}

/* path?query without the parameters the edge sets, at p: its end. */
static char *write_base(char *p, const ephd_request_t *req) {
  memcpy(p, POP_PATH, sizeof(POP_PATH) - 1);
  p += sizeof(POP_PATH) - 1;
  char sep = '?';
  const char *q = req->query.ptr, *end = q + req->query.len;
  while (q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    if (amp == NULL) amp = end;
    const char *eq = memchr(q, '=', (size_t)(amp - q));
    size_t klen = (size_t)((eq ? eq : amp) - q);
    if (amp > q && !edge_sets(q, klen)) {
      *p++ = sep;
      sep = '&';
      memcpy(p, q, (size_t)(amp - q));
      p += amp - q;
    }
    q = amp + 1;
  }
  return p;
}

static void on_ask(void *data, int result, const ephd_peer_response_t *res);

/* A member's answer, as the relay reads it, is the client's bytes too, as
 * a relayed pop's (relay_edge.h). */
static void on_answer_bytes(void *data, size_t bytes) {
  whole_t *w = ((ask_t *)data)->w;
  ephd_deferred_account(w->deferred, w->size + bytes);
}

/* Sends the pop, marked, to member m: a take (not waiting) or a notify
 * (parked for what is left of the timeout). 0, or a peer failure. */
static int ask(whole_t *w, uint32_t m, int notify) {
  if (w->peer[m] == NULL) return EPHD_PEER_E_INVALID;
  uint64_t now = ephd_ffi_now_ms();
  uint64_t left = w->deadline_ms > now ? w->deadline_ms - now : 1;
  char extra[80] = "";
  if (notify)
    snprintf(extra, sizeof(extra), "&wait=true&timeout=%" PRIu64 "&notify=true",
             left);
  size_t elen = strlen(extra), tlen = w->base_len + elen;
  size_t hlen = ephd_mark_size(w->tenant_len);
  char *buf = malloc(tlen + hlen);
  if (buf == NULL) return EPHD_PEER_E_INVALID;
  memcpy(buf, w->base, w->base_len);
  memcpy(buf + w->base_len, extra, elen);
  ephd_slice_t method = {"GET", 3}, target = {buf, tlen};
  ephd_mark_write(buf + tlen, w->tenant, w->tenant_len, method, target, 0);
  ephd_peer_request_t rq = {
      .method = method,
      .target = target,
      .headers = {buf + tlen, hlen},
      .timeout_ms = notify ? left + PARK_MARGIN_MS : ephd_relay_timeout_ms(),
      .parks = notify,
      .answer_bytes = on_answer_bytes,
  };
  w->ask[m].w = w;
  w->ask[m].member = m;
  int rc = ephd_peer_send(w->peer[m], &rq, on_ask, &w->ask[m], &w->ask[m].call);
  free(buf);
  return rc;
}

static void drop_asks(whole_t *w) {
  for (uint32_t m = 0; m < w->n; m++)
    if (w->ask[m].call) {
      ephd_peer_cancel(w->ask[m].call);
      w->ask[m].call = NULL;
    }
}

static void finish(whole_t *w) {
  drop_asks(w);
  free(w);
}

/* Nothing to take anywhere (or the deadline): an empty batch, as a local
 * pop's timeout answers; a 503 when no member answered at all. */
static void answer_empty(whole_t *w) {
  ephd_conn_t *c = ephd_deferred_conn(w->deferred);
  if (!w->heard) {
    ephd_error_write(ephd_http_begin_error(
                         c, EPHD_CODE_EPHEMERAL_FORWARD_FAILED,
                         ephd_code_status(EPHD_CODE_EPHEMERAL_FORWARD_FAILED),
                         "Retry-After: 1\r\n"),
                     EPHD_CODE_EPHEMERAL_FORWARD_FAILED,
                     "no member of the cell could be reached; retry soon");
  } else {
    ephd_buf_t *o = ephd_http_begin(c, 200, NULL);
    ephd_buf_appends(o, "{\"queue\":");
    ephd_json_write_string(o, w->queue, w->queue_len);
    ephd_buf_appends(o, ",\"messages\":[]}");
  }
  ephd_http_end(c);
  finish(w);
}

/* What a member's answer to a take or a notify says: -1 when it is not a
 * pop's answer; else *ready, and the messages' ids as JSON strings joined
 * by commas in ids (when ids is not NULL) with their count. */
static int read_answer(const ephd_peer_response_t *res, ephd_buf_t *ids,
                       uint32_t *count, int *ready) {
  const char *p = res->body.ptr, *end = p + res->body.len;
  ephd_buf_t scratch, id;
  ephd_buf_init(&scratch);
  ephd_buf_init(&id);
  ephd_slice_t key;
  int first = 1, m, rc = -1;
  *count = 0;
  *ready = 0;
  p = ephd_json_ws(p, end);
  if (p >= end || *p++ != '{') goto out;
  while ((m = ephd_json_member(&p, end, &scratch, &key, &first)) == 1) {
    if (key.len == 5 && memcmp(key.ptr, "ready", 5) == 0 && end - p >= 4 &&
        memcmp(p, "true", 4) == 0)
      *ready = 1;
    if (key.len != 8 || memcmp(key.ptr, "messages", 8) != 0) {
      if ((p = ephd_json_skip(p, end)) == NULL) goto out;
      continue;
    }
    if (p >= end || *p++ != '[') goto out;
    p = ephd_json_ws(p, end);
    if (p < end && *p == ']') {
      p++;
      continue;
    }
    for (;;) {
      /* {"id":..,"partition":..,...}: the id is its string member. */
      if (p >= end || *p++ != '{') goto out;
      int f = 1, k;
      ephd_slice_t mk;
      while ((k = ephd_json_member(&p, end, &scratch, &mk, &f)) == 1) {
        if (ids && mk.len == 2 && memcmp(mk.ptr, "id", 2) == 0 && p < end &&
            *p == '"') {
          id.len = 0;
          if ((p = ephd_json_string(p, end, &id)) == NULL) goto out;
          if (*count) ephd_buf_appends(ids, ",");
          ephd_buf_appends(ids, "{\"id\":");
          ephd_json_write_string(ids, id.base, id.len);
          ephd_buf_appends(ids, "}");
        } else if ((p = ephd_json_skip(p, end)) == NULL) {
          goto out;
        }
      }
      if (k != 0) goto out;
      (*count)++;
      p = ephd_json_ws(p, end);
      if (p >= end) goto out;
      if (*p == ']') break;
      if (*p++ != ',') goto out;
      p = ephd_json_ws(p, end);
    }
    p++;
  }
  if (m == 0) rc = 0;
out:
  ephd_buf_free(&scratch);
  ephd_buf_free(&id);
  return rc;
}

static void on_acked(void *data, int result, const ephd_peer_response_t *res) {
  (void)data;
  (void)result;
  (void)res;
}

/* commitOnDelivery: the take's ids acked at member m, the client's answer
 * written. Not acked (the member unreached), they are redelivered after
 * their lease: a duplicate to an at-least-once consumer, never a loss. */
static void ack_taken(whole_t *w, uint32_t m, const ephd_buf_t *ids) {
  ephd_buf_t body;
  ephd_buf_init(&body);
  ephd_buf_appends(&body, "{\"queue\":");
  ephd_json_write_string(&body, w->queue, w->queue_len);
  if (w->group) {
    ephd_buf_appends(&body, ",\"group\":");
    ephd_json_write_string(&body, w->group, w->group_len);
  }
  ephd_buf_appends(&body, ",\"acks\":[");
  ephd_buf_append(&body, ids->base, ids->len);
  ephd_buf_appends(&body, "]}");
  size_t clen = sizeof(JSON_CT) - 1,
         hlen = clen + ephd_mark_size(w->tenant_len);
  char *h = malloc(hlen);
  ephd_slice_t method = {"POST", 4}, target = {ACK_PATH, sizeof(ACK_PATH) - 1};
  if (h && w->peer[m]) {
    memcpy(h, JSON_CT, clen);
    ephd_mark_write(h + clen, w->tenant, w->tenant_len, method, target,
                    body.len);
    ephd_peer_request_t rq = {
        .method = method,
        .target = target,
        .headers = {h, hlen},
        .body = {body.base, body.len},
        .timeout_ms = ephd_relay_timeout_ms(),
    };
    ephd_peer_call_t *call;
    ephd_peer_send(w->peer[m], &rq, on_acked, NULL, &call);
  }
  free(h);
  ephd_buf_free(&body);
}

/* The member's answer with messages: the client's, as it came. */
static void deliver(whole_t *w, uint32_t m, const ephd_peer_response_t *res,
                    const ephd_buf_t *ids) {
  ephd_conn_t *c = ephd_deferred_conn(w->deferred);
  ephd_buf_t *o = ephd_http_begin(c, 200, NULL);
  ephd_buf_append(o, res->body.ptr, res->body.len);
  ephd_http_end(c);
  if (w->auto_ack) ack_taken(w, m, ids);
  finish(w);
}

/* Parks a notify at every member; none sent, the pop is answered. */
static void notify_all(whole_t *w) {
  w->phase = NOTIFY;
  w->pending = 0;
  for (uint32_t m = 0; m < w->n; m++)
    if (ask(w, m, 1) == 0) w->pending++;
  if (w->pending == 0) answer_empty(w);
}

/* The sweep's next member, or, asked every one, a notify for a pop that
 * waits and the empty answer for one that does not. */
static void sweep_on(whole_t *w) {
  while (w->left > 0) {
    uint32_t m = w->next;
    w->next = (w->next + 1) % w->n;
    w->left--;
    if (ask(w, m, 0) == 0) return;
  }
  if (w->waits && ephd_ffi_now_ms() < w->deadline_ms)
    notify_all(w);
  else
    answer_empty(w);
}

static int is_pop_answer(const ephd_peer_response_t *res) {
  static const char json[] = "application/json";
  return res->status == 200 && res->content_type.len == sizeof(json) - 1 &&
         memcmp(res->content_type.ptr, json, sizeof(json) - 1) == 0;
}

static void on_ask(void *data, int result, const ephd_peer_response_t *res) {
  ask_t *a = data;
  whole_t *w = a->w;
  a->call = NULL;
  ephd_buf_t ids;
  ephd_buf_init(&ids);
  uint32_t count = 0;
  int ready = 0;
  int ok = result == EPHD_PEER_OK && is_pop_answer(res) &&
           read_answer(res, &ids, &count, &ready) == 0;
  if (ok) w->heard = 1;
  if (w->phase == NOTIFY) {
    if (ok && ready) {
      /* The others took nothing: cancelled, they just unpark. */
      drop_asks(w);
      w->phase = TAKE;
      if (ask(w, a->member, 0) != 0) notify_all(w);
    } else if (--w->pending == 0) {
      answer_empty(w);
    }
  } else if (ok && count > 0) {
    deliver(w, a->member, res, &ids);
  } else if (w->phase == SWEEP) {
    sweep_on(w);
  } else if (ok && ephd_ffi_now_ms() < w->deadline_ms) {
    notify_all(w); /* the take lost a race: wait again */
  } else {
    answer_empty(w);
  }
  ephd_buf_free(&ids);
}

static void on_deadline(void *data) { answer_empty(data); }

static void on_cancel(void *data) { finish(data); }

static const ephd_deferred_ops_t WHOLE = {
    .deadline = on_deadline,
    .cancel = on_cancel,
    /* The broker stops: an empty batch, as a local parked pop gets; a take
     * in flight leased what it took, which is redelivered. */
    .stop = on_deadline,
};

int ephd_whole_pop(const ephd_request_t *req, const ephd_view_t *view,
                   const char *tenant, size_t tenant_len) {
  const ephd_pop_args_t *a = &ephd_op_of(req)->pub.pop;
  uint32_t n = view->count, start = turn_of(tenant, tenant_len, a) % n;
  if (start == view->self && ephd_pop_finds_here(a, tenant, tenant_len))
    return EPHD_OK;
  size_t glen = a->group ? a->group_len : 0;
  size_t base_cap = sizeof(POP_PATH) + req->query.len;
  size_t size = sizeof(whole_t) + n * (sizeof(ephd_peer_t *) + sizeof(ask_t)) +
                tenant_len + a->queue_len + glen + base_cap;
  whole_t *w = calloc(1, size);
  if (w == NULL) abort();
  w->n = n;
  w->size = size;
  w->peer = (ephd_peer_t **)(w + 1);
  w->ask = (ask_t *)(w->peer + n);
  w->tenant = (char *)(w->ask + n);
  w->queue = w->tenant + tenant_len;
  w->base = w->queue + a->queue_len + glen;
  memcpy(w->tenant, tenant, tenant_len);
  memcpy(w->queue, a->queue, a->queue_len);
  w->tenant_len = tenant_len;
  w->queue_len = a->queue_len;
  if (a->group) {
    w->group = w->queue + a->queue_len;
    memcpy(w->group, a->group, glen);
    w->group_len = glen;
  }
  w->base_len = (size_t)(write_base(w->base, req) - w->base);
  for (uint32_t m = 0; m < n; m++)
    w->peer[m] = ephd_peer(view->members[m].address);
  w->waits = a->wait && a->timeout_ms > 0;
  w->auto_ack = a->auto_ack;
  w->deadline_ms = ephd_ffi_now_ms() + (w->waits ? a->timeout_ms : 0);
  w->phase = SWEEP;
  w->heard = start == view->self; /* it looked here, and found nothing */
  /* This broker's turn found nothing here: it is asked last, by the
   * sweep's end, only through a notify. */
  w->next = start;
  w->left = n;
  if (start == view->self) {
    w->next = (start + 1) % n;
    w->left = n - 1;
  }
  w->deferred = ephd_http_defer(req, &WHOLE, w);
  ephd_deferred_account(w->deferred, size);
  /* A backstop: every ask has its own deadline, and a sweep asks each
   * member once. */
  uint64_t timeout = ephd_relay_timeout_ms();
  ephd_deferred_deadline(
      w->deferred, w->deadline_ms + PARK_MARGIN_MS + (uint64_t)n * timeout);
  sweep_on(w);
  return EPHD_RELAYED;
}
