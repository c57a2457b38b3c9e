/* A pop naming no partition, over the whole cell: see whole_pop.h. */
#include "whole_pop.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "commands.h"
#include "delivery.h"
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
/* The longest refusal kept (whole.refusal): a refusal's JSON is short. */
#define REFUSAL_MAX 512
/* A waiting pop's answer at its timeout waits this much more for a take
 * already in flight. */
#define TAKE_MARGIN_MS 100
/* A member that refused its notify (its tenant's parked pops there at
 * their bound, a failure) would wake nobody: while the others wait, it is
 * asked with a take this often, so a message pushed there is found
 * within it rather than at the pop's timeout. Such members are asked one
 * after another, never two at once: a take leases what it finds, and only
 * one answer is written (the other's messages would wait out their
 * lease). */
#define RECHECK_MS 1000
/* Where each (tenant, queue, group) starts its turn among the members: a
 * counter per hash bucket, no allocation; two queues sharing a bucket
 * still each move on at every pop of either. */
#define TURNS 256
static uint32_t turns[TURNS];

static const char POP_PATH[] = "/api/v1/ephemeral/pop";

typedef struct whole whole_t;

/* One member's request in flight for the pop. */
typedef struct {
  whole_t *w;
  ephd_peer_call_t *call; /* NULL: none */
  uint32_t member;
  int deaf; /* its notify refused: asked with takes (RECHECK_MS) */
} ask_t;

enum { SWEEP, NOTIFY, TAKE };

struct whole {
  ephd_deferred_t *deferred;
  uint32_t n;       /* members in the view at the pop */
  uint32_t next;    /* the sweep's next member */
  uint32_t left;    /* members the sweep has still to ask */
  uint32_t pending; /* notifies out */
  uint32_t recheck; /* the recheck's next member to ask */
  uint32_t held;    /* a ready member waiting for a recheck's take: +1 */
  int phase;
  int waits, auto_ack;
  int heard; /* some member answered the pop (empty or not) */
  uint64_t deadline_ms;
  /* A member's refusal of a notify (the tenant's parked slots or queues
   * there), kept for a pop no member parked: it hears that, as a local
   * pop would, not an empty batch at once that a waiting client asks
   * again for at once. */
  int refused; /* its status, or 0 */
  int waited;  /* a notify was parked, and ended: the timeout came */
  char refusal[REFUSAL_MAX], retry_after[11];
  size_t refusal_len;
  size_t size;        /* of the allocation */
  ephd_peer_t **peer; /* [n], NULL where the address does not parse */
  ask_t *ask;         /* [n] */
  size_t tenant_len, queue_len, group_len, base_len;
  char *tenant, *queue, *group; /* group NULL: queue mode */
  char *base; /* the pop's target without wait, timeout, notify, autoAck */
};

static uint32_t turn_of(const char *tenant, size_t tenant_len,
                        const ephd_pop_args_t *a) {
  return turns[ephd_pop_group_hash(tenant, tenant_len, a) % TURNS]++;
}

/* Whether a query's parameter is one the edge sets itself at each send
 * (a client's own would be a repeated parameter there), or commits on
 * delivery (delivery.h). */
static int edge_sets(const char *k, size_t n) {
  static const char *const names[] = {"wait", "timeout", "notify"};
  for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
    if (strlen(names[i]) == n && memcmp(names[i], k, n) == 0) return 1;
  return ephd_delivery_commits(k, n);
}

/* path?query without the parameters the edge sets, at p: its end. */
static char *write_base(char *p, const ephd_request_t *req) {
  memcpy(p, POP_PATH, sizeof(POP_PATH) - 1);
  return ephd_delivery_query(p + sizeof(POP_PATH) - 1, req->query, 1,
                             edge_sets);
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
  ephd_mark_write(buf + tlen, w->tenant, w->tenant_len);
  ephd_peer_request_t rq = {
      .method = method,
      .target = target,
      .headers = {buf + tlen, hlen},
      .timeout_ms = notify ? left + PARK_MARGIN_MS : ephd_relay_timeout_ms(),
      .parks = notify,
      .answer_bytes = on_answer_bytes,
      .share = notify ? ephd_relay_share(w->tenant, w->tenant_len) : 0,
  };
  w->ask[m].w = w;
  w->ask[m].member = m;
  int rc = ephd_peer_send(w->peer[m], &rq, on_ask, &w->ask[m], &w->ask[m].call);
  free(buf);
  return rc;
}

/* Cancels what is out; takes too unless notifies_only (a recheck's take
 * out leased what it found: it is let answer). */
static void drop_asks(whole_t *w, int notifies_only) {
  for (uint32_t m = 0; m < w->n; m++)
    if (w->ask[m].call && !(notifies_only && w->ask[m].deaf)) {
      ephd_peer_cancel(w->ask[m].call);
      w->ask[m].call = NULL;
    }
}

static void finish(whole_t *w) {
  drop_asks(w, 0);
  free(w);
}

/* Nothing to take anywhere (or the deadline): an empty batch, as a local
 * pop's timeout answers; a 503 when no member answered at all. */
static void write_empty(whole_t *w) {
  ephd_conn_t *c = ephd_deferred_conn(w->deferred);
  if (w->refused && !w->waited) {
    char extra[32];
    snprintf(extra, sizeof(extra), "Retry-After: %s\r\n", w->retry_after);
    ephd_buf_t *o =
        ephd_http_begin(c, w->refused, w->retry_after[0] ? extra : NULL);
    ephd_buf_append(o, w->refusal, w->refusal_len);
    ephd_http_end(c);
  } else if (!w->heard) {
    ephd_error_write(ephd_http_begin_error(
                         c, EPHD_CODE_EPHEMERAL_FORWARD_FAILED,
                         ephd_code_status(EPHD_CODE_EPHEMERAL_FORWARD_FAILED),
                         "Retry-After: 1\r\n"),
                     EPHD_CODE_EPHEMERAL_FORWARD_FAILED,
                     "no member of the cell could be reached; retry soon");
    ephd_http_end(c);
  } else {
    ephd_pop_answer_empty(c, w->queue, w->queue_len);
  }
  finish(w);
}

static void answer_empty(whole_t *w) {
  ephd_relay_count_whole_pop(w->heard ? EPHD_WHOLE_ANSWERED
                                      : EPHD_WHOLE_FAILED);
  write_empty(w);
}

/* The member's answer with messages: the client's, as it came. */
static void deliver(whole_t *w, uint32_t m, const ephd_peer_response_t *res,
                    const ephd_buf_t *ids) {
  ephd_conn_t *c = ephd_deferred_conn(w->deferred);
  ephd_buf_t *o = ephd_http_begin(c, 200, NULL);
  ephd_buf_append(o, res->body.ptr, res->body.len);
  ephd_http_end(c);
  ephd_relay_count_whole_pop(EPHD_WHOLE_ANSWERED);
  if (w->auto_ack)
    ephd_delivery_ack(w->peer[m], w->tenant, w->tenant_len, w->queue,
                      w->queue_len, w->group, w->group_len, ids,
                      ephd_relay_timeout_ms());
  finish(w);
}

/* The deadline the deferred holds: the pop's own, or sooner the next
 * take of a member that refused its notify (before the pop's timeout
 * only, so a take in flight then keeps its margin). */
static void recheck_later(whole_t *w) {
  uint64_t at = w->deadline_ms + TAKE_MARGIN_MS;
  for (uint32_t m = 0; m < w->n && w->phase == NOTIFY; m++)
    if (w->ask[m].deaf) {
      uint64_t soon = ephd_ffi_now_ms() + RECHECK_MS;
      if (soon < w->deadline_ms) at = soon;
      break;
    }
  ephd_deferred_deadline(w->deferred, at);
}

/* Whether a recheck's take is out. */
static int taking(const whole_t *w) {
  for (uint32_t m = 0; m < w->n; m++)
    if (w->ask[m].deaf && w->ask[m].call) return 1;
  return 0;
}

/* The recheck's next member that refused its notify, asked with a take;
 * none left, the round ends (the next starts at the next recheck). */
static void recheck_on(whole_t *w) {
  while (w->recheck < w->n) {
    uint32_t m = w->recheck++;
    if (w->ask[m].deaf && ask(w, m, 0) == 0) return;
  }
}

static void notify_all(whole_t *w);

/* The take from the member that answered ready, once no recheck's take
 * is out. */
static void take_held(whole_t *w) {
  uint32_t m = w->held - 1;
  w->held = 0;
  if (ask(w, m, 0) != 0) notify_all(w);
}

/* Parks a notify at every member; none sent, the pop is answered (429
 * when the tenant's share of a member's parking lane refused one: an
 * empty batch would have the client ask again at once). */
static void notify_all(whole_t *w) {
  w->phase = NOTIFY;
  w->pending = 0;
  w->recheck = w->n; /* no round until the first recheck */
  w->refused = w->waited = 0;
  int over_share = 0;
  for (uint32_t m = 0; m < w->n; m++) {
    int rc = ask(w, m, 1);
    w->ask[m].deaf = rc != 0;
    if (rc == 0)
      w->pending++;
    else if (rc == EPHD_PEER_E_SHARE)
      over_share = 1;
  }
  if (w->pending) {
    recheck_later(w);
    return;
  }
  if (over_share) {
    ephd_relay_count_whole_pop(EPHD_WHOLE_ANSWERED);
    ephd_relay_share_refused(ephd_deferred_conn(w->deferred));
    finish(w);
    return;
  }
  answer_empty(w);
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

/* Keeps res when it is a member's refusal (a 4xx of the taxonomy, JSON,
 * short): see whole.refused. */
static void keep_refusal(whole_t *w, int result,
                         const ephd_peer_response_t *res) {
  static const char json[] = "application/json";
  if (result != EPHD_PEER_OK || res->status < 400 || res->status >= 500 ||
      ephd_status_index(res->status) >= EPHD_STATUS_COUNT ||
      res->content_type.len != sizeof(json) - 1 ||
      memcmp(res->content_type.ptr, json, sizeof(json) - 1) != 0 ||
      res->body.len == 0 || res->body.len > REFUSAL_MAX)
    return;
  w->refused = res->status;
  memcpy(w->refusal, res->body.ptr, res->body.len);
  w->refusal_len = res->body.len;
  size_t n = res->retry_after.len;
  int seconds = n > 0 && n < sizeof(w->retry_after);
  for (size_t i = 0; seconds && i < n; i++)
    seconds = res->retry_after.ptr[i] >= '0' && res->retry_after.ptr[i] <= '9';
  w->retry_after[0] = 0;
  if (seconds) {
    memcpy(w->retry_after, res->retry_after.ptr, n);
    w->retry_after[n] = 0;
  }
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
           ephd_delivery_read(res, &ids, &count, &ready) == 0;
  if (ok) w->heard = 1;
  if (w->phase != SWEEP && a->deaf) {
    /* A recheck's take: what it took is the client's; nothing, and the
     * round asks the next (the member again at the next recheck), or the
     * member that answered ready meanwhile is taken from. */
    if (ok && count > 0)
      deliver(w, a->member, res, &ids);
    else if (w->held)
      take_held(w);
    else if (w->pending == 0)
      answer_empty(w); /* the notifies ended while it was out */
    else
      recheck_on(w);
  } else if (w->phase == NOTIFY) {
    if (ok && ready) {
      /* The others took nothing: cancelled, they just unpark. A
       * recheck's take out answers first (it may have leased some). */
      drop_asks(w, 1);
      w->phase = TAKE;
      w->held = a->member + 1;
      if (!taking(w)) take_held(w);
    } else {
      if (ok) {
        w->waited = 1;
      } else {
        keep_refusal(w, result, res);
        a->deaf = 1;
      }
      /* Every notify ended: refused everywhere, or the timeout (a
       * recheck's take out answers first). */
      if (--w->pending == 0) {
        if (!taking(w)) answer_empty(w);
      } else if (a->deaf)
        recheck_later(w);
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

/* A waiting pop's timeout: an empty batch, as a local pop's, whether or
 * not a member answered yet. */
static void on_deadline(void *data) {
  whole_t *w = data;
  if (ephd_ffi_now_ms() < w->deadline_ms) { /* a recheck's, not the pop's */
    if (w->phase == NOTIFY && !taking(w)) {
      w->recheck = 0;
      recheck_on(w);
    }
    recheck_later(w);
    return;
  }
  if (w->waits) w->heard = 1;
  answer_empty(w);
}

static void on_cancel(void *data) {
  ephd_relay_count_whole_pop(EPHD_WHOLE_CANCELLED);
  finish(data);
}

/* The broker stops: an empty batch, as a local parked pop gets, even
 * before any member answered (the pop is cut short, not failed); a take
 * in flight leased what it took, which is redelivered. */
static void on_stop(void *data) {
  whole_t *w = data;
  ephd_relay_count_whole_pop(EPHD_WHOLE_STOPPED);
  w->heard = 1;
  w->refused = 0;
  write_empty(w);
}

static const ephd_deferred_ops_t WHOLE = {
    .deadline = on_deadline,
    .cancel = on_cancel,
    .stop = on_stop,
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
  /* A pop that waits is answered at its timeout, as a local one is, even
   * while a member that does not answer (stopped, its loop stuck) holds
   * the sweep for the relay's deadline: a moment past it, so a take in
   * flight at the timeout most often lands. One that does not wait has a
   * backstop: every ask has its own deadline, and a sweep asks each member
   * once. */
  uint64_t timeout = ephd_relay_timeout_ms();
  ephd_deferred_deadline(w->deferred, w->waits
                                          ? w->deadline_ms + TAKE_MARGIN_MS
                                          : w->deadline_ms + PARK_MARGIN_MS +
                                                (uint64_t)n * timeout);
  sweep_on(w);
  return EPHD_RELAYED;
}
