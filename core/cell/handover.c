/* Ownership moves: see handover.h. */
#include "handover.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"
#include "http.h"
#include "list.h"
#include "log.h"
#include "mark.h"
#include "members.h"
#include "op.h"
#include "peer_client.h"
#include "prom.h"
#include "transfer.h"

/* Hand-overs in flight at once: enough to keep a few peers busy, few
 * enough that a move does not fill the relay's queues ahead of relayed
 * client requests. */
#define WINDOW 4
/* A failed hand-over is tried again after this, doubling up to the most. */
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000
/* A new owner holds what a hand-over may still bring groups for this much
 * past the hand-over's own deadline: the old owner's view may change up
 * to a heartbeat after ours. */
#define HOLD_MARGIN_MS 1000

/* A leaving sender names itself (leaving=<id>): see takes(). */
static const char TARGET[] = "/api/v1/ephemeral/handover";

static uv_loop_t *loop;
static ephd_engine_t *engine;
static const char *token;
static ephd_handover_limits_t limits;

/* Messages dropped because their partition moved away without being
 * handed over (unplanned), or could not be (handover); and handed over. */
static uint64_t wiped_unplanned, wiped_handover, handed_over;

/* One partition on its way to its new owner, written out already. Its
 * owner is found again at each try, from the view then: a member may have
 * joined or left since, or the partition come home. */
typedef struct job {
  ephd_node_t link; /* in queued or waiting; neither while in flight */
  uint64_t messages;
  uint64_t deadline_ms; /* past it, it is dropped */
  uint64_t retry_at_ms; /* while waiting */
  uint32_t tries;
  int in_flight;
  char address[EPHD_MEMBER_ADDRESS_MAX]; /* of the last try, for its log */
  char *key; /* tenant, queue, partition: length-prefixed, for pending */
  size_t key_len, tenant_len;
  ephd_buf_t body;
} job_t;

/* The hand-overs under way: those to send, those waiting to be tried
 * again, how many are in flight, and their tally for the log line.
 * pending finds a queued or waiting one by its partition (flush). */
static ephd_list_t queued, waiting;
static ephd_map_t pending;
static uint32_t in_flight;
static uv_timer_t retry_timer, hold_timer;
static int timers_ready, leaving;
static uint64_t tally_partitions, tally_handed, tally_dropped;
static void (*on_done)(void);

void ephd_handover_init(uv_loop_t *l, ephd_engine_t *e, const char *cell_token,
                        const ephd_handover_limits_t *lim) {
  loop = l;
  engine = e;
  token = cell_token;
  limits = *lim;
}

static void timers_init(void) {
  if (timers_ready) return;
  uv_timer_init(loop, &retry_timer);
  uv_timer_init(loop, &hold_timer);
  timers_ready = 1;
}

static void log_count(const char *event, const char *level, uint64_t partitions,
                      uint64_t messages, uint64_t bytes, const char *msg) {
  char np[24], nm[24], nb[24];
  snprintf(np, sizeof(np), "%" PRIu64, partitions);
  snprintf(nm, sizeof(nm), "%" PRIu64, messages);
  snprintf(nb, sizeof(nb), "%" PRIu64, bytes);
  ephd_log(level, event, "partitions", np, "messages", nm, "bytes", nb, "msg",
           msg, NULL);
}

static void append_name(ephd_buf_t *b, const char *s, size_t len) {
  ephd_buf_append(b, (const char *)&len, sizeof(len));
  ephd_buf_append(b, s, len);
}

static const char *take_name(const char **p, size_t *len) {
  memcpy(len, *p, sizeof(*len));
  const char *s = *p + sizeof(*len);
  *p = s + *len;
  return s;
}

/* A job leaves pending when it is sent or ends; a second job for the same
 * partition (it came home and went again) is not indexed over the first. */
static void unindex(job_t *j) {
  if (ephd_map_get(&pending, j->key, j->key_len) == j)
    ephd_map_del(&pending, j->key, j->key_len);
}

static void job_free(job_t *j) {
  unindex(j);
  ephd_buf_free(&j->body);
  free(j->key);
  free(j);
}

/* The hand-overs are over when nothing is queued, waiting or in flight:
 * one line for them, and a leaving broker goes on with its stop. */
static void settle(void) {
  if (queued.head || waiting.head || in_flight) return;
  if (timers_ready) uv_timer_stop(&retry_timer);
  if (tally_partitions) {
    char np[24], nh[24], nd[24];
    snprintf(np, sizeof(np), "%" PRIu64, tally_partitions);
    snprintf(nh, sizeof(nh), "%" PRIu64, tally_handed);
    snprintf(nd, sizeof(nd), "%" PRIu64, tally_dropped);
    ephd_log(tally_dropped ? "warn" : "info", "partitions_handed_over",
             "partitions", np, "messages", nh, "dropped", nd, NULL);
  }
  tally_partitions = tally_handed = tally_dropped = 0;
  void (*done)(void) = on_done;
  on_done = NULL;
  if (done) done();
}

static void drop(job_t *j) {
  wiped_handover += j->messages;
  tally_dropped += j->messages;
  job_free(j);
}

/* The cell a partition may go to now: the view; once this broker is
 * leaving, the members that answered its notice as staying, without it
 * (self is then one past the members, an entry no owner can be): a member
 * told that stays is a target even before this broker's view took it in
 * (it had not answered a probe yet), and the partitions were placed over
 * those when the stop wrote them out. others has room for the members. */
static ephd_view_t current_view(ephd_member_t *others) {
  const ephd_view_t *v = leaving ? ephd_members_staying() : ephd_members_view();
  if (!leaving) return *v;
  uint32_t n = 0;
  for (uint32_t i = 0; i < v->count; i++)
    if (i != v->self) others[n++] = v->members[i];
  return (ephd_view_t){others, n, n};
}

/* The partition came home before it could go: merged back here, as a
 * hand-over from another member would be. Its old ids stay fenced. */
static void keep(job_t *j) {
  ephd_transfer_t t;
  const char *why;
  if (ephd_transfer_parse(j->body.base, j->body.len, SIZE_MAX, &t, &why) != 0)
    abort(); /* written here: it always reads */
  const char *queue = t.base + t.queue_off;
  const char *partition = t.base + t.partition_off;
  ephd_queue_t *q = ephd_engine_queue_open(engine, j->key + sizeof(size_t),
                                           j->tenant_len, queue, t.queue_len);
  ephd_ring_t *r = ephd_queue_ring_open(q, partition, t.partition_len);
  ephd_engine_accept(engine, q, r, &t, ephd_ffi_now_ms());
  ephd_transfer_free(&t);
  ephd_log("info", "handover_kept", "msg",
           "the partition's owner is this broker again: kept here", NULL);
  job_free(j);
}

static void pump(void);
static void send_job(job_t *j);

static void on_retry(uv_timer_t *t) {
  (void)t;
  pump();
}

static void arm_retry(void) {
  if (waiting.head == NULL) return;
  uint64_t now = uv_now(loop), next = UINT64_MAX;
  for (ephd_node_t *n = waiting.head; n; n = n->next) {
    job_t *j = EPHD_ENTRY(n, job_t, link);
    if (j->retry_at_ms < next) next = j->retry_at_ms;
  }
  uv_timer_start(&retry_timer, on_retry, next > now ? next - now : 0, 0);
}

/* Tried again after a backoff, while the deadline allows one more try. */
static void retry(job_t *j) {
  uint64_t backoff = (uint64_t)BACKOFF_FIRST_MS
                     << (j->tries < 5 ? j->tries : 5);
  if (backoff > BACKOFF_MAX_MS) backoff = BACKOFF_MAX_MS;
  uint64_t at = uv_now(loop) + backoff;
  if (at >= j->deadline_ms) {
    drop(j);
    return;
  }
  j->retry_at_ms = at;
  if (ephd_map_get(&pending, j->key, j->key_len) == NULL)
    ephd_map_put(&pending, j->key, j->key_len, j);
  ephd_list_append(&waiting, &j->link);
  arm_retry();
}

static void on_answer(void *data, int result, const ephd_peer_response_t *res) {
  job_t *j = data;
  j->in_flight = 0;
  in_flight--;
  if (result == EPHD_PEER_OK && res->status == 200) {
    handed_over += j->messages;
    tally_handed += j->messages;
    job_free(j);
  } else {
    /* 503 owner_moved: the receiver's view gives the partition to another
     * member; the next try asks the view again. */
    char status[16];
    snprintf(status, sizeof(status), "%d", res ? res->status : 0);
    ephd_log("warn", "handover_failed", "peer", j->address, "reason",
             result == EPHD_PEER_OK ? "refused" : ephd_peer_kind_name(result),
             "status", status, NULL);
    if (result == EPHD_PEER_E_STOPPING)
      drop(j);
    else
      retry(j);
  }
  pump();
  settle();
}

/* One try: to the partition's owner in the view now, which may be this
 * broker again. */
static void send_job(job_t *j) {
  uint64_t now = uv_now(loop);
  if (now >= j->deadline_ms) {
    drop(j);
    return;
  }
  const ephd_view_t *v = leaving ? ephd_members_staying() : ephd_members_view();
  ephd_member_t *others = calloc(v->count ? v->count : 1, sizeof(*others));
  if (others == NULL) abort();
  ephd_view_t view = current_view(others);
  const char *p = j->key;
  size_t tl, ql, pl;
  const char *t = take_name(&p, &tl);
  const char *qn = take_name(&p, &ql);
  const char *part = take_name(&p, &pl);
  const ephd_member_t *owner =
      view.count ? ephd_placement_owner(&view, t, tl, qn, ql, part, pl) : NULL;
  if (owner == NULL) {
    free(others);
    drop(j); /* a leaving broker alone: nobody to take it */
    return;
  }
  if (owner == &view.members[view.self]) {
    free(others);
    keep(j);
    return;
  }
  snprintf(j->address, sizeof(j->address), "%s", owner->address);
  char target[sizeof(TARGET) + 32];
  if (leaving)
    snprintf(target, sizeof(target), "%s?leaving=%016" PRIx64, TARGET,
             v->members[v->self].id);
  else
    snprintf(target, sizeof(target), "%s", TARGET);
  free(others);
  size_t target_len = strlen(target);
  ephd_buf_t headers;
  ephd_buf_init(&headers);
  char *mark = ephd_buf_reserve(&headers, ephd_mark_size(tl));
  headers.len = (size_t)(ephd_mark_write(mark, t, tl) - headers.base);
  ephd_buf_appends(&headers, "Content-Type: " EPHD_TRANSFER_MEDIA_TYPE "\r\n");
  ephd_peer_t *peer = ephd_peer(j->address);
  ephd_peer_request_t rq = {
      .method = {"POST", 4},
      .target = {target, target_len},
      .headers = {headers.base, headers.len},
      .body = {j->body.base, j->body.len},
      .timeout_ms = j->deadline_ms - now,
  };
  ephd_peer_call_t *sent;
  int rc = peer ? ephd_peer_send(peer, &rq, on_answer, j, &sent)
                : EPHD_PEER_E_INVALID;
  ephd_buf_free(&headers);
  j->tries++;
  if (rc == EPHD_PEER_E_STOPPING) {
    drop(j);
  } else if (rc != 0) {
    retry(j);
  } else {
    j->in_flight = 1;
    in_flight++;
  }
}

/* Sends what the window allows: first the waiting ones whose time came. */
static void pump(void) {
  uint64_t now = uv_now(loop);
  for (ephd_node_t *n = waiting.head, *next; n; n = next) {
    next = n->next;
    job_t *j = EPHD_ENTRY(n, job_t, link);
    if (j->retry_at_ms > now) continue;
    j->retry_at_ms = 0;
    ephd_list_remove(&waiting, &j->link);
    ephd_list_append(&queued, &j->link);
  }
  while (queued.head && in_flight < WINDOW) {
    job_t *j = EPHD_ENTRY(queued.head, job_t, link);
    ephd_list_remove(&queued, &j->link);
    unindex(j);
    send_job(j);
  }
  arm_retry();
  settle();
}

void ephd_handover_flush(const char *tenant, size_t tenant_len,
                         const char *queue, size_t queue_len,
                         const char *partition, size_t partition_len) {
  if (pending.count == 0) return; /* the hot path: no hand-over under way */
  ephd_buf_t key;
  ephd_buf_init(&key);
  append_name(&key, tenant, tenant_len);
  append_name(&key, queue, queue_len);
  append_name(&key, partition, partition_len);
  job_t *j = ephd_map_get(&pending, key.base, key.len);
  ephd_buf_free(&key);
  if (j == NULL) return;
  /* Ahead of the request that asked, past the window and any backoff. */
  ephd_list_remove(j->retry_at_ms ? &waiting : &queued, &j->link);
  unindex(j);
  send_job(j);
  settle();
}

/* --- holding what a hand-over may still bring groups for ------------- */

static void release(void *arg, const char *tenant, size_t tenant_len,
                    const char *queue, size_t queue_len, const char *partition,
                    size_t partition_len) {
  (void)arg;
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, queue, queue_len);
  ephd_ring_t *r = q ? ephd_queue_ring(q, partition, partition_len) : NULL;
  if (r && r->awaiting) ephd_engine_release(engine, q, r);
}

/* Past the hold: every partition frees what all the groups it knows are
 * past, whether or not a hand-over came. */
static void on_hold_over(uv_timer_t *t) {
  (void)t;
  ephd_engine_hold_new_rings(0);
  ephd_engine_each_partition(engine, release, NULL);
}

static void hold(void) {
  timers_init();
  ephd_engine_hold_new_rings(1);
  uv_timer_start(&hold_timer, on_hold_over, limits.timeout_ms + HOLD_MARGIN_MS,
                 0);
  uv_unref((uv_handle_t *)&hold_timer);
}

/* --- finding what moves ---------------------------------------------- */

/* What a view change does with each partition held, found by one walk and
 * acted on after it (the walk must not change the engine): each is its
 * three names, length-prefixed, in one buffer, then what to do. */
enum { WIPE = UINT32_MAX, HOLD = UINT32_MAX - 1 };

typedef struct {
  const ephd_view_t *view;
  const ephd_view_t *kept; /* the old view's members still live; NULL: none */
  const ephd_view_t *was;  /* the old view; NULL: this broker was alone */
  int stopping;
  ephd_buf_t moving;
  uint32_t count;
} walk_t;

static int member_of(const ephd_member_t *list, uint32_t n, uint64_t id) {
  for (uint32_t i = 0; i < n; i++)
    if (list[i].id == id) return 1;
  return 0;
}

static void find_moving(void *arg, const char *tenant, size_t tenant_len,
                        const char *queue, size_t queue_len,
                        const char *partition, size_t partition_len) {
  walk_t *w = arg;
  const ephd_member_t *owner = ephd_placement_owner(
      w->view, tenant, tenant_len, queue, queue_len, partition, partition_len);
  uint32_t what;
  if (owner == &w->view->members[w->view->self]) {
    /* Ours now: if it was another's, a hand-over may bring its groups. */
    const ephd_member_t *had =
        w->was ? ephd_placement_owner(w->was, tenant, tenant_len, queue,
                                      queue_len, partition, partition_len)
               : NULL;
    if (w->stopping || (had && had == &w->was->members[w->was->self])) return;
    what = HOLD;
  } else {
    /* Held here rightly, so handed on: when this broker stops; when it
     * owned the partition among the members still live (a member that
     * left and one that joined in the same read hand it on all the same);
     * or when it adopted it by a hand-over (ephd_ring_t's adopted). Else a
     * copy left over from a disagreement of views: emptied. */
    int planned = w->stopping;
    if (!planned && w->kept) {
      const ephd_member_t *had =
          ephd_placement_owner(w->kept, tenant, tenant_len, queue, queue_len,
                               partition, partition_len);
      planned = had == &w->kept->members[w->kept->self];
    }
    if (!planned) {
      ephd_queue_t *q =
          ephd_engine_queue(engine, tenant, tenant_len, queue, queue_len);
      ephd_ring_t *r = q ? ephd_queue_ring(q, partition, partition_len) : NULL;
      planned = r && r->adopted;
    }
    what = planned ? (uint32_t)(owner - w->view->members) : WIPE;
  }
  append_name(&w->moving, tenant, tenant_len);
  append_name(&w->moving, queue, queue_len);
  append_name(&w->moving, partition, partition_len);
  ephd_buf_append(&w->moving, (const char *)&what, sizeof(what));
  w->count++;
}

/* Writes the partition out and queues it; 0, or -1 when it cannot go
 * within the move's bytes. */
static int hand_over(const char *key, size_t key_len, size_t tenant_len,
                     ephd_queue_t *q, ephd_ring_t *r, uint64_t *budget,
                     uint64_t *messages) {
  job_t *j = calloc(1, sizeof(*j));
  if (j == NULL) return -1;
  ephd_buf_init(&j->body);
  *messages = j->messages =
      ephd_transfer_write(&j->body, q, r, ephd_ffi_now_ms());
  if (j->body.len > *budget || j->body.len > limits.max_body_bytes) {
    ephd_buf_free(&j->body);
    free(j);
    return -1;
  }
  *budget -= j->body.len;
  j->key = malloc(key_len);
  if (j->key == NULL) abort();
  memcpy(j->key, key, key_len);
  j->key_len = key_len;
  j->tenant_len = tenant_len;
  j->deadline_ms = uv_now(loop) + limits.timeout_ms;
  if (ephd_map_get(&pending, j->key, key_len) == NULL)
    ephd_map_put(&pending, j->key, key_len, j);
  ephd_list_append(&queued, &j->link);
  return 0;
}

static void move_out(walk_t *w) {
  uint64_t budget = limits.max_bytes;
  uint64_t wiped = 0, wiped_bytes = 0, wiped_parts = 0;
  const char *p = w->moving.base;
  for (uint32_t i = 0; i < w->count; i++) {
    const char *key = p;
    size_t tl, ql, pl;
    const char *t = take_name(&p, &tl);
    const char *qn = take_name(&p, &ql);
    const char *part = take_name(&p, &pl);
    size_t key_len = (size_t)(p - key);
    uint32_t what;
    memcpy(&what, p, sizeof(what));
    p += sizeof(what);
    ephd_queue_t *q = ephd_engine_queue(engine, t, tl, qn, ql);
    ephd_ring_t *r = q ? ephd_queue_ring(q, part, pl) : NULL;
    if (r == NULL) continue;
    if (what == HOLD) {
      r->awaiting = 1;
      continue;
    }
    /* A partition with no message still goes when it knows groups: its new
     * owner must learn them before it frees anything they have not read. */
    uint64_t messages = 0;
    int handed = what != WIPE && (ephd_ring_depth(r) > 0 || r->ncursors > 0) &&
                 hand_over(key, key_len, tl, q, r, &budget, &messages) == 0;
    uint64_t bytes, m = ephd_engine_wipe(engine, q, r, &bytes);
    r->adopted = 0;
    if (what != WIPE) {
      tally_partitions++;
      if (!handed && m) {
        wiped_handover += m;
        tally_dropped += m;
      }
    } else if (m) {
      wiped += m;
      wiped_bytes += bytes;
      wiped_parts++;
    }
  }
  if (wiped_parts) {
    wiped_unplanned += wiped;
    log_count("partitions_wiped", "warn", wiped_parts, wiped, wiped_bytes,
              "moved without a hand-over: their new owner starts them empty "
              "(the loss contract)");
  }
  timers_init();
  pump();
}

void ephd_handover_view_changed(const ephd_member_t *was, uint32_t nwas,
                                const ephd_view_t *view) {
  if (token == NULL || leaving || view->count < 2) return;
  const ephd_member_t *self = &view->members[view->self];
  ephd_view_t before = {was, nwas, 0};
  while (before.self < nwas && was[before.self].id != self->id) before.self++;
  int known = before.self < nwas; /* this broker was in the old view */
  /* The old view's members that are still live, this broker among them. */
  ephd_member_t *still = calloc(nwas ? nwas : 1, sizeof(*still));
  if (still == NULL) abort();
  ephd_view_t kept = {still, 0, 0};
  int someone_left = 0;
  for (uint32_t i = 0; i < nwas; i++) {
    if (!member_of(view->members, view->count, was[i].id)) {
      someone_left = 1;
      continue;
    }
    if (was[i].id == self->id) kept.self = kept.count;
    still[kept.count++] = was[i];
  }
  /* Partitions come to this broker when it was alone (it just joined: a
   * broker alone before may as well have been serving, and gains nothing
   * by a join, which holds only what it opens meanwhile) or a member left:
   * until their old owners' hand-overs can have come, it frees nothing the
   * groups they bring may not have read. */
  if (nwas < 2 || someone_left) hold();
  walk_t w = {.view = view,
              .kept = known ? &kept : NULL,
              .was = known ? &before : NULL};
  ephd_buf_init(&w.moving);
  ephd_engine_each_partition(engine, find_moving, &w);
  move_out(&w);
  ephd_buf_free(&w.moving);
  free(still);
}

void ephd_handover_leave(const ephd_view_t *view, void (*done)(void)) {
  leaving = 1;
  on_done = done;
  if (token == NULL || view->count < 2) {
    settle();
    return;
  }
  /* The cell as it will be without this broker. Its self is one past the
   * members, an entry no owner can be. */
  ephd_member_t *others = calloc(view->count, sizeof(*others));
  if (others == NULL) abort();
  uint32_t n = 0;
  for (uint32_t i = 0; i < view->count; i++)
    if (i != view->self) others[n++] = view->members[i];
  ephd_view_t after = {others, n, n};
  walk_t w = {.view = &after, .stopping = 1};
  ephd_buf_init(&w.moving);
  ephd_engine_each_partition(engine, find_moving, &w);
  move_out(&w);
  ephd_buf_free(&w.moving);
  free(others);
  settle();
}

/* --- the new owner's half -------------------------------------------- */

static int parse(const ephd_request_t *req, ephd_transfer_t *t) {
  const char *why;
  if (ephd_transfer_parse(req->body.ptr, req->body.len,
                          ephd_ffi_config()->max_name_bytes, t, &why) == 0)
    return EPHD_OK;
  ephd_op_state_t *op = ephd_op_of(req);
  snprintf(op->pub.scan.message, sizeof(op->pub.scan.message), "%s", why);
  return EPHD_E_BAD_REQUEST;
}

int ephd_ffi_transfer_check(const ephd_request_t *req) {
  ephd_transfer_t t;
  int rc = parse(req, &t);
  if (rc == EPHD_OK) ephd_transfer_free(&t);
  return rc;
}

/* The sender's id when it is leaving (leaving=<id>): 0 when not. */
static uint64_t leaver_of(const ephd_request_t *req) {
  const char *q = req->query.ptr, *end = q + req->query.len;
  for (; q + 8 <= end; q++) {
    if (memcmp(q, "leaving=", 8) != 0 || (q > req->query.ptr && q[-1] != '&'))
      continue;
    uint64_t id = 0;
    for (q += 8; q < end && *q != '&'; q++) {
      int d = *q >= '0' && *q <= '9'   ? *q - '0'
              : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10
                                       : -1;
      if (d < 0) return 0;
      id = id << 4 | (uint64_t)d;
    }
    return id;
  }
  return 0;
}

/* Whether this broker takes the partition: it owns it by its own view, or
 * its view still gives it to the sender, which is leaving (our view has
 * not dropped it yet): adopted then, and handed on if our view moves it
 * elsewhere. Any other owner, or a sender that stays, is a view that
 * differs from ours: owner_moved, and the sender tries the owner its view
 * names at its next try (itself again: kept there). */
static int takes(const ephd_request_t *req, const char *tenant,
                 size_t tenant_len, const ephd_transfer_t *t, int *adopted) {
  const ephd_view_t *v = ephd_members_view();
  *adopted = 0;
  if (token == NULL || v->count < 2) return 1;
  const ephd_member_t *owner = ephd_placement_owner(
      v, tenant, tenant_len, t->base + t->queue_off, t->queue_len,
      t->base + t->partition_off, t->partition_len);
  if (owner == &v->members[v->self]) return 1;
  *adopted = 1;
  return owner->id == leaver_of(req);
}

/* Read again rather than kept from the check: a hand-over is rare, and
 * the operation then holds nothing of its own kind. */
int ephd_ffi_transfer_commit(const ephd_request_t *req, const char *tenant,
                             size_t tenant_len,
                             const ephd_tenant_limits_t *lim) {
  ephd_op_state_t *op = ephd_op_of(req);
  op->pub.refusals = 0;
  ephd_transfer_t t;
  if (parse(req, &t) != EPHD_OK) return EPHD_E_BAD_REQUEST;
  const char *queue = t.base + t.queue_off;
  const char *partition = t.base + t.partition_off;
  ephd_conn_t *c = ephd_http_conn(req);
  int adopted;
  if (!takes(req, tenant, tenant_len, &t, &adopted)) {
    ephd_transfer_free(&t);
    ephd_code_t code = EPHD_CODE_OWNER_MOVED;
    ephd_error_write(ephd_http_begin_error(c, code, ephd_code_status(code),
                                           "Retry-After: 1\r\n"),
                     code, "this broker does not own the partition");
    ephd_http_end(c);
    return EPHD_OK;
  }
  uint64_t now = ephd_ffi_now_ms();
  ephd_engine_t *e = engine;
  ephd_tenant_t *tn = ephd_engine_tenant(e, tenant, tenant_len);
  ephd_queue_t *q = tn ? ephd_tenant_queue(tn, queue, t.queue_len) : NULL;
  if (q) ephd_engine_expire(e, q, now);
  ephd_ring_t *r = q ? ephd_queue_ring(q, partition, t.partition_len) : NULL;
  ephd_push_plan_t plan;
  ephd_engine_plan_accept(e, tn, tenant_len, q, t.queue_len, r, t.partition_len,
                          t.nmsgs, t.bytes, lim, &plan);
  op->pub.refusals = plan.refusals;
  if (plan.refusals) {
    ephd_transfer_free(&t);
    return EPHD_E_REFUSED;
  }
  if (q == NULL)
    q = ephd_engine_queue_open(e, tenant, tenant_len, queue, t.queue_len);
  if (r == NULL) r = ephd_queue_ring_open(q, partition, t.partition_len);
  ephd_engine_accept(e, q, r, &t, now);
  r->adopted |= (uint8_t)adopted;
  ephd_engine_touch(e, q, now);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"accepted\":");
  ephd_buf_append_u64(out, t.nmsgs);
  ephd_buf_append(out, "}", 1);
  ephd_http_end(c);
  ephd_transfer_free(&t);
  return EPHD_OK;
}

void ephd_handover_metrics(ephd_buf_t *o) {
  const char *wipes = "queen_ephemeral_wipes_total";
  ephd_prom_family(o, wipes, "counter",
                   "Messages dropped because their partition moved to another "
                   "broker: without a hand-over (unplanned), or past what a "
                   "hand-over could carry (handover).");
  ephd_prom_sample(o, wipes, "{reason=\"unplanned\"}", wiped_unplanned);
  ephd_prom_sample(o, wipes, "{reason=\"handover\"}", wiped_handover);
  const char *handed = "queen_ephemeral_handed_over_total";
  ephd_prom_family(o, handed, "counter",
                   "Messages handed over to a partition's new owner and "
                   "accepted there.");
  ephd_prom_sample(o, handed, "", handed_over);
}
