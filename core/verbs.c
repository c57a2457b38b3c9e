#include "verbs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"
#include "http.h"
#include "json.h"

static ephd_engine_t *engine;
static uv_loop_t *loop;

/* Scratch reused by every request: the loop is single-threaded and a scan is
 * consumed by the commit of the same dispatch. */
static ephd_buf_t queue_name, second_name, ids;
/* A body's decoded member keys and ack values; given back after a scan only
 * when one was large, so a small push allocates nothing here. */
static ephd_buf_t scratch_key, scratch_val;
static ephd_span_t *spans;
static uint32_t spans_cap;
static const char *scanned_body;
typedef struct {
  uint32_t off, len;
  ephd_ack_status_t status;
} ack_item_t;
static ack_item_t *acks;
static uint32_t acks_cap;
static ephd_buf_t body;

void ephd_verbs_init(ephd_engine_t *e, uv_loop_t *l) {
  engine = e;
  loop = l;
}

void ephd_verbs_close(void) {
  ephd_buf_free(&queue_name);
  ephd_buf_free(&second_name);
  ephd_buf_free(&ids);
  ephd_buf_free(&scratch_key);
  ephd_buf_free(&scratch_val);
  ephd_buf_free(&body);
  free(spans);
  free(acks);
  spans = NULL;
  acks = NULL;
  spans_cap = acks_cap = 0;
}

static uint64_t now_ms(void) { return uv_now(loop); }

static void scratch_reset(void) { scratch_key.len = scratch_val.len = 0; }

static void scratch_release(void) {
  if (scratch_key.cap > 4096)
    ephd_buf_free(&scratch_key);
  if (scratch_val.cap > 4096)
    ephd_buf_free(&scratch_val);
}

static int fail(char *message, const char *text) {
  snprintf(message, 200, "%s", text);
  return EPHD_E_BAD_REQUEST;
}

/* How much of a decoded key a message quotes: at most 64 bytes, cut before
 * a character rather than inside one, so the answer stays UTF-8. */
static int shown(const ephd_buf_t *key) {
  size_t n = key->len > 64 ? 64 : key->len;
  while (n < key->len && n > 0 && ((unsigned char)key->base[n] & 0xC0) == 0x80)
    n--;
  return (int)n;
}

/* Why a refused body was refused, when the reason is its encoding: the
 * scanner stops at the first string that is not UTF-8 without knowing it
 * will be refused, so the whole body is checked again, on this path only. */
static void explain_encoding(const ephd_request_t *req, char *message) {
  if (!ephd_utf8_valid(req->body.ptr, req->body.len))
    fail(message, "the body is not UTF-8: every string must be strict "
                  "UTF-8 (RFC 3629)");
}

static int key_is(const ephd_buf_t *key, const char *name) {
  size_t n = strlen(name);
  return key->len == n && memcmp(key->base, name, n) == 0;
}

static const char *name_value(const char *p, const char *end, ephd_buf_t *out,
                              ephd_slice_t *slice) {
  if (p >= end || *p != '"')
    return NULL;
  out->len = 0;
  p = ephd_json_string(p, end, out);
  slice->ptr = out->base ? out->base : "";
  slice->len = out->len;
  return p;
}

static const char *expect_end(const char *p, const char *end) {
  p = ephd_json_ws(p, end);
  return p == end ? p : NULL;
}

static void grow_spans(uint32_t n) {
  if (n <= spans_cap)
    return;
  uint32_t cap = spans_cap ? spans_cap : 64;
  while (cap < n)
    cap *= 2;
  spans = realloc(spans, cap * sizeof(*spans));
  if (spans == NULL)
    abort();
  spans_cap = cap;
}

static const char *scan_messages(const char *p, const char *end,
                                 const char *base, ephd_push_scan_t *s,
                                 ephd_buf_t *key) {
  uint32_t max = ephd_config()->max_items;
  if (p >= end || *p != '[')
    return NULL;
  p = ephd_json_ws(p + 1, end);
  if (p < end && *p == ']')
    return p + 1;
  for (;;) {
    if (p >= end || *p != '{') {
      fail(s->message, "each message must be an object {payload}");
      return NULL;
    }
    p++;
    int first = 1, seen = 0, r;
    while ((r = ephd_json_member(&p, end, key, &first)) == 1) {
      if (!key_is(key, "payload") || seen) {
        fail(s->message, "each message is {payload} and nothing else");
        return NULL;
      }
      const char *v = p;
      p = ephd_json_skip(p, end);
      if (p == NULL)
        return NULL;
      seen = 1;
      if (s->count == max) {
        snprintf(s->message, 200, "at most %u messages per push", max);
        return NULL;
      }
      grow_spans(s->count + 1);
      spans[s->count].off = (uint32_t)(v - base);
      spans[s->count].len = (uint32_t)(p - v);
      s->count++;
      s->bytes += (uint64_t)(p - v);
    }
    if (r < 0)
      return NULL;
    if (!seen) {
      fail(s->message, "a message needs a payload");
      return NULL;
    }
    p = ephd_json_ws(p, end);
    if (p < end && *p == ']')
      return p + 1;
    if (p >= end || *p != ',')
      return NULL;
    p = ephd_json_ws(p + 1, end);
  }
}

int ephd_push_scan(const ephd_request_t *req, ephd_push_scan_t *s) {
  memset(s, 0, sizeof(*s));
  s->partition.ptr = "Default";
  s->partition.len = 7;
  scanned_body = NULL;
  const char *base = req->body.ptr, *end = base + req->body.len;
  const char *p = ephd_json_ws(base, end);
  scratch_reset();
  int rc = EPHD_E_BAD_REQUEST, first = 1, r, has_messages = 0;
  if (p >= end || *p != '{') {
    fail(s->message, "the body must be a JSON object");
    goto done;
  }
  p++;
  while ((r = ephd_json_member(&p, end, &scratch_key, &first)) == 1) {
    if (key_is(&scratch_key, "queue") && !s->has_queue) {
      p = name_value(p, end, &queue_name, &s->queue);
      s->has_queue = 1;
      if (p == NULL) {
        fail(s->message, "queue must be a string");
        goto done;
      }
    } else if (key_is(&scratch_key, "partition") && !s->has_partition) {
      p = name_value(p, end, &second_name, &s->partition);
      s->has_partition = 1;
      if (p == NULL) {
        fail(s->message, "partition must be a string");
        goto done;
      }
    } else if (key_is(&scratch_key, "messages") && !has_messages) {
      has_messages = 1;
      s->message[0] = 0;
      p = scan_messages(p, end, base, s, &scratch_key);
      if (p == NULL) {
        if (!s->message[0])
          fail(s->message, "messages must be an array of {payload}");
        goto done;
      }
    } else {
      snprintf(s->message, 200,
               "unknown or repeated field \"%.*s\": a push has queue, "
               "partition and messages",
               shown(&scratch_key), scratch_key.base ? scratch_key.base : "");
      goto done;
    }
  }
  if (r < 0 || expect_end(p, end) == NULL) {
    fail(s->message, "the body is not valid JSON");
    goto done;
  }
  if (!s->has_queue) {
    fail(s->message, "queue is required");
    goto done;
  }
  if (!has_messages) {
    fail(s->message, "messages is required");
    goto done;
  }
  scanned_body = base;
  rc = EPHD_OK;
done:
  if (rc != EPHD_OK)
    explain_encoding(req, s->message);
  scratch_release();
  return rc;
}

int ephd_push_commit(const char *tenant, size_t tenant_len,
                     const ephd_push_scan_t *s,
                     const ephd_tenant_limits_t *limits, uint32_t *refusals) {
  *refusals = 0;
  if (scanned_body == NULL)
    return EPHD_E_BAD_REQUEST;
  const char *body_base = scanned_body;
  scanned_body = NULL;
  uint64_t now = now_ms();
  ephd_tenant_t *t = ephd_engine_tenant(engine, tenant, tenant_len);
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, s->queue.ptr, s->queue.len);
  if (q)
    ephd_engine_expire(engine, q, now);
  ephd_ring_t *r =
      q ? ephd_queue_ring(q, s->partition.ptr, s->partition.len) : NULL;
  /* Planned before anything exists: a refused push leaves no queue or
   * partition behind. */
  ephd_push_plan_t plan;
  ephd_engine_plan_push(engine, t, tenant_len, q, s->queue.len, r,
                        s->partition.len, s->count, s->bytes, limits, &plan);
  *refusals = plan.refusals;
  if (plan.refusals)
    return EPHD_E_REFUSED;
  if (q == NULL)
    q = ephd_engine_queue_open(engine, tenant, tenant_len, s->queue.ptr,
                               s->queue.len);
  if (r == NULL)
    r = ephd_queue_ring_open(q, s->partition.ptr, s->partition.len);
  ephd_engine_push(engine, q, r, body_base, spans, s->count, &plan, now);
  ephd_engine_touch(engine, q, now);
  return EPHD_OK;
}

static void answer_pop(ephd_conn_t *c, const ephd_queue_t *q,
                       const ephd_buf_t *items) {
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"queue\":");
  ephd_json_write_string(out, q->name, q->name_len);
  ephd_buf_appends(out, ",\"messages\":[");
  ephd_buf_append(out, items->base, items->len);
  ephd_buf_appends(out, "]}");
  ephd_http_end(c);
}

int ephd_pop(const ephd_request_t *req, ephd_pop_args_t *a) {
  const ephd_tenant_limits_t *limits = a->limits;
  ephd_tenant_t *t = ephd_engine_tenant(engine, a->tenant, a->tenant_len);
  ephd_queue_t *q = t ? ephd_map_get(&t->queues, a->queue, a->queue_len) : NULL;
  ephd_ring_t *r = a->partition && q
                       ? ephd_queue_ring(q, a->partition, a->partition_len)
                       : NULL;
  const char *gname = a->group ? a->group : "";
  size_t glen = a->group ? a->group_len : 0;
  uint32_t g = 0;
  int new_ring = a->partition && r == NULL;
  int new_group = q == NULL || !ephd_queue_group_find(q, gname, glen, &g);
  /* Everything a pop would create is planned before any of it exists: a
   * refused pop leaves no tenant, queue, partition or group behind. */
  a->refusals = 0;
  if (q == NULL && ephd_tenant_full_of_queues(t, limits))
    a->refusals |= EPHD_REFUSE_TENANT_QUEUES;
  if (q && ((new_ring && ephd_queue_full_of_partitions(engine, q)) ||
            (a->group && new_group && ephd_queue_full_of_groups(engine, q))))
    a->refusals |= EPHD_REFUSE_QUEUE_PARTS;
  /* Queue mode's cursor is made by a queue's first pop and names nothing
   * the client chose: it is charged, never refused, or a full cell could
   * not be drained by a consumer that had not popped yet. */
  int named_group = new_group && (a->group != NULL || q == NULL);
  a->refusals |= ephd_engine_plan_names(
      engine, t, a->tenant_len, q, a->queue_len, new_ring, a->partition_len,
      named_group, glen, limits);
  /* Whether it would park is known before anything exists too, so a pop
   * refused for the tenant's parked slots leaves nothing behind either. */
  uint64_t now = now_ms();
  if (a->wait && a->timeout_ms && limits && limits->max_parked && t &&
      t->parked >= limits->max_parked &&
      !ephd_engine_would_deliver(engine, q, r, new_ring, new_group, g, now))
    a->refusals |= EPHD_REFUSE_PARKED;
  if (a->refusals)
    return EPHD_E_REFUSED;
  if (q == NULL)
    q = ephd_engine_queue_open(engine, a->tenant, a->tenant_len, a->queue,
                               a->queue_len);
  if (new_ring)
    r = ephd_queue_ring_open(q, a->partition, a->partition_len);
  if (new_group)
    g = ephd_queue_group_open(q, gname, glen);
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_engine_touch(engine, q, now);
  body.len = 0;
  uint32_t got =
      ephd_engine_pop(engine, q, r, g, a->batch, a->auto_ack, now, &body);
  if (got || !a->wait || a->timeout_ms == 0) {
    answer_pop(c, q, &body);
    return EPHD_OK;
  }
  ephd_waiter_t *w = ephd_http_park(c);
  w->queue = q;
  w->ring = r;
  w->group = g;
  w->batch = a->batch;
  w->auto_ack = a->auto_ack;
  w->deadline_ms = now + a->timeout_ms;
  w->windowed = 0;
  ephd_gate_park(&q->groups[g]->gate, w, a->timeout_ms);
  return EPHD_PARKED;
}

static void answer_waiter(ephd_waiter_t *w) {
  ephd_queue_t *q = w->queue;
  uint64_t now = now_ms();
  ephd_engine_touch(engine, q, now);
  body.len = 0;
  ephd_engine_pop(engine, q, w->ring, w->group, w->batch, w->auto_ack, now,
                  &body);
  answer_pop(ephd_http_waiter_conn(w), q, &body);
}

int ephd_verbs_waiter_wake(ephd_waiter_t *w) {
  ephd_queue_t *q = w->queue;
  if (!ephd_engine_ready(q, w->ring, w->group))
    return 0;
  /* windowBuffer: a woken waiter waits up to window_ms (never past its own
   * timeout) for its batch to reach window_count, and holds its place in
   * line meanwhile so later waiters do not take the messages it waits on. */
  uint64_t want =
      q->opts.window_count < w->batch ? q->opts.window_count : w->batch;
  if (want > 1 && ephd_engine_available(q, w->ring, w->group, want) < want) {
    if (!w->windowed) {
      uint64_t now = now_ms();
      uint64_t left = w->deadline_ms > now ? w->deadline_ms - now : 0;
      w->windowed = 1;
      ephd_gate_rearm(w, q->opts.window_ms < left ? q->opts.window_ms : left);
    }
    return 0;
  }
  ephd_gate_unpark(w);
  answer_waiter(w);
  return 1;
}

void ephd_verbs_waiter_timeout(ephd_waiter_t *w) {
  if (w->windowed) {
    answer_waiter(w);
    return;
  }
  ephd_buf_t none;
  ephd_buf_init(&none);
  answer_pop(ephd_http_waiter_conn(w), w->queue, &none);
}

static void grow_acks(uint32_t n) {
  if (n <= acks_cap)
    return;
  uint32_t cap = acks_cap ? acks_cap : 64;
  while (cap < n)
    cap *= 2;
  acks = realloc(acks, cap * sizeof(*acks));
  if (acks == NULL)
    abort();
  acks_cap = cap;
}

static const char *scan_ack_item(const char *p, const char *end,
                                 ephd_ack_scan_t *s, ephd_buf_t *key,
                                 ephd_buf_t *val) {
  if (p >= end || *p != '{') {
    fail(s->message, "each ack must be an object {id, status}");
    return NULL;
  }
  p++;
  int first = 1, r, has_id = 0, has_status = 0, has_error = 0;
  ack_item_t item = {0, 0, EPHD_ACK_COMPLETED};
  while ((r = ephd_json_member(&p, end, key, &first)) == 1) {
    if (key_is(key, "id") && !has_id) {
      has_id = 1;
      item.off = (uint32_t)ids.len;
      if (p >= end || *p != '"' || !(p = ephd_json_string(p, end, &ids))) {
        fail(s->message, "an ack id must be a string");
        return NULL;
      }
      item.len = (uint32_t)(ids.len - item.off);
    } else if (key_is(key, "status") && !has_status) {
      has_status = 1;
      val->len = 0;
      if (p >= end || *p != '"' || !(p = ephd_json_string(p, end, val))) {
        fail(s->message, "an ack status must be a string");
        return NULL;
      }
      if (key_is(val, "completed"))
        item.status = EPHD_ACK_COMPLETED;
      else if (key_is(val, "failed"))
        item.status = EPHD_ACK_FAILED;
      else if (key_is(val, "retry"))
        item.status = EPHD_ACK_RETRY;
      else {
        fail(s->message, "status is completed, failed or retry");
        return NULL;
      }
    } else if (key_is(key, "error") && !has_error) {
      has_error = 1;
      val->len = 0;
      if (p >= end || *p != '"' || !(p = ephd_json_string(p, end, val))) {
        fail(s->message, "an ack error must be a string");
        return NULL;
      }
    } else {
      fail(s->message, "an ack is {id, status, error} and nothing else");
      return NULL;
    }
  }
  if (r < 0)
    return NULL;
  if (!has_id) {
    fail(s->message, "each ack needs an id");
    return NULL;
  }
  uint32_t max = ephd_config()->max_items;
  if (s->count == max) {
    snprintf(s->message, 200, "at most %u acks per call", max);
    return NULL;
  }
  grow_acks(s->count + 1);
  acks[s->count++] = item;
  return p;
}

static const char *scan_acks(const char *p, const char *end, ephd_ack_scan_t *s,
                             ephd_buf_t *key, ephd_buf_t *val) {
  if (p >= end || *p != '[')
    return NULL;
  p = ephd_json_ws(p + 1, end);
  if (p < end && *p == ']')
    return p + 1;
  for (;;) {
    p = scan_ack_item(p, end, s, key, val);
    if (p == NULL)
      return NULL;
    p = ephd_json_ws(p, end);
    if (p < end && *p == ']')
      return p + 1;
    if (p >= end || *p != ',')
      return NULL;
    p = ephd_json_ws(p + 1, end);
  }
}

int ephd_ack_scan(const ephd_request_t *req, ephd_ack_scan_t *s) {
  memset(s, 0, sizeof(*s));
  ids.len = 0;
  scanned_body = NULL;
  const char *base = req->body.ptr, *end = base + req->body.len;
  const char *p = ephd_json_ws(base, end);
  scratch_reset();
  int rc = EPHD_E_BAD_REQUEST, first = 1, r, has_acks = 0;
  if (p >= end || *p != '{') {
    fail(s->message, "the body must be a JSON object");
    goto done;
  }
  p++;
  while ((r = ephd_json_member(&p, end, &scratch_key, &first)) == 1) {
    if (key_is(&scratch_key, "queue") && !s->has_queue) {
      s->has_queue = 1;
      if (!(p = name_value(p, end, &queue_name, &s->queue))) {
        fail(s->message, "queue must be a string");
        goto done;
      }
    } else if (key_is(&scratch_key, "group") && !s->has_group) {
      s->has_group = 1;
      if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
        s->has_group = 0; /* "group": null is queue mode, as when absent */
        p += 4;
        continue;
      }
      if (!(p = name_value(p, end, &second_name, &s->group))) {
        fail(s->message, "group must be a string");
        goto done;
      }
    } else if (key_is(&scratch_key, "acks") && !has_acks) {
      has_acks = 1;
      s->message[0] = 0;
      if (!(p = scan_acks(p, end, s, &scratch_key, &scratch_val))) {
        if (!s->message[0])
          fail(s->message, "acks must be an array");
        goto done;
      }
    } else {
      snprintf(s->message, 200,
               "unknown or repeated field \"%.*s\": an ack has queue, group "
               "and acks",
               shown(&scratch_key), scratch_key.base ? scratch_key.base : "");
      goto done;
    }
  }
  if (r < 0 || expect_end(p, end) == NULL) {
    fail(s->message, "the body is not valid JSON");
    goto done;
  }
  if (!s->has_queue) {
    fail(s->message, "queue is required");
    goto done;
  }
  if (!has_acks) {
    fail(s->message, "acks is required");
    goto done;
  }
  scanned_body = base;
  rc = EPHD_OK;
done:
  if (rc != EPHD_OK)
    explain_encoding(req, s->message);
  scratch_release();
  return rc;
}

static const char *const outcome_names[] = {"acked", "redelivered", "stale",
                                            "unknown"};

int ephd_ack_commit(const ephd_request_t *req, const char *tenant,
                    size_t tenant_len, const ephd_ack_scan_t *s) {
  if (scanned_body == NULL)
    return EPHD_E_BAD_REQUEST;
  scanned_body = NULL;
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, s->queue.ptr, s->queue.len);
  uint32_t g = UINT32_MAX;
  uint64_t now = now_ms();
  if (q) {
    ephd_engine_touch(engine, q, now);
    const char *gname = s->has_group ? s->group.ptr : "";
    size_t glen = s->has_group ? s->group.len : 0;
    if (!ephd_queue_group_find(q, gname, glen, &g))
      g = UINT32_MAX;
  }
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"results\":[");
  for (uint32_t i = 0; i < s->count; i++) {
    const char *id = ids.base + acks[i].off;
    ephd_outcome_t o =
        ephd_engine_ack(engine, q, g, id, acks[i].len, acks[i].status, now);
    if (i)
      ephd_buf_append(out, ",", 1);
    ephd_buf_appends(out, "{\"id\":");
    ephd_json_write_string(out, id, acks[i].len);
    ephd_buf_appends(out, ",\"outcome\":\"");
    ephd_buf_appends(out, outcome_names[o]);
    ephd_buf_appends(out, "\"}");
  }
  ephd_buf_appends(out, "]}");
  ephd_http_end(c);
  return EPHD_OK;
}

int ephd_tenant_stats(const char *tenant, size_t tenant_len,
                      ephd_tenant_stats_t *out) {
  memset(out, 0, sizeof(*out));
  ephd_tenant_t *t = ephd_engine_tenant(engine, tenant, tenant_len);
  if (t == NULL)
    return EPHD_E_NOT_FOUND;
  ephd_tenant_stats_of(t, out);
  return EPHD_OK;
}

int ephd_tenant_next(size_t *pos, ephd_slice_t *tenant,
                     ephd_tenant_stats_t *out) {
  ephd_tenant_t *t = ephd_engine_next_tenant(engine, pos);
  if (t == NULL)
    return 0;
  tenant->ptr = ephd_tenant_name(t, &tenant->len);
  ephd_tenant_stats_of(t, out);
  return 1;
}

uint64_t ephd_now_ms(void) { return now_ms(); }

double ephd_wall_time(void) {
  uv_timeval64_t tv;
  uv_gettimeofday(&tv);
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

uint64_t ephd_reset(const char *tenant, size_t tenant_len, const char *queue,
                    size_t queue_len) {
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, queue, queue_len);
  return q ? ephd_engine_reset(engine, q) : 0;
}

static void write_drops(ephd_buf_t *out, const ephd_queue_t *q) {
  ephd_buf_appends(out, "{\"bounds\":");
  ephd_buf_append_u64(out, q->drops_bounds);
  ephd_buf_appends(out, ",\"ttl\":");
  ephd_buf_append_u64(out, q->drops_ttl);
  ephd_buf_appends(out, ",\"retry\":");
  ephd_buf_append_u64(out, q->drops_retry);
  ephd_buf_append(out, "}", 1);
}

static void write_options(ephd_buf_t *out, const ephd_options_t *o) {
  ephd_buf_appends(out, "{\"maxBytes\":");
  ephd_buf_append_u64(out, o->max_bytes);
  ephd_buf_appends(out, ",\"maxLength\":");
  ephd_buf_append_u64(out, o->max_length);
  ephd_buf_appends(out, o->drop_oldest ? ",\"policy\":\"dropOldest\""
                                       : ",\"policy\":\"reject\"");
  ephd_buf_appends(out, ",\"ttlSeconds\":");
  ephd_buf_append_u64(out, o->ttl_s);
  ephd_buf_appends(out, ",\"leaseSeconds\":");
  ephd_buf_append_u64(out, o->lease_s);
  ephd_buf_appends(out, ",\"retryLimit\":");
  ephd_buf_append_u64(out, o->retry_limit);
  if (o->window_count) {
    ephd_buf_appends(out, ",\"windowBuffer\":{\"ms\":");
    ephd_buf_append_u64(out, o->window_ms);
    ephd_buf_appends(out, ",\"count\":");
    ephd_buf_append_u64(out, o->window_count);
    ephd_buf_appends(out, "}}");
  } else {
    ephd_buf_appends(out, ",\"windowBuffer\":null}");
  }
}

void ephd_queues(const ephd_request_t *req, const char *tenant,
                 size_t tenant_len) {
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"queues\":[");
  ephd_tenant_t *t = ephd_map_get(&engine->tenants, tenant, tenant_len);
  uint64_t count = 0;
  if (t) {
    size_t pos = 0;
    ephd_queue_t *q;
    uint64_t now = now_ms();
    while ((q = ephd_map_next(&t->queues, &pos))) {
      ephd_engine_expire(engine, q, now);
      if (count++)
        ephd_buf_append(out, ",", 1);
      ephd_buf_appends(out, "{\"queue\":");
      ephd_json_write_string(out, q->name, q->name_len);
      ephd_buf_appends(out, q->declared ? ",\"tier\":\"declared\",\"depth\":"
                                        : ",\"tier\":\"implicit\",\"depth\":");
      ephd_buf_append_u64(out, q->depth);
      ephd_buf_appends(out, ",\"bytes\":");
      ephd_buf_append_u64(out, q->bytes);
      ephd_buf_appends(out, ",\"partitions\":");
      ephd_buf_append_u64(out, q->nrings);
      ephd_buf_appends(out, ",\"groups\":");
      ephd_buf_append_u64(out, ephd_queue_named_groups(q));
      ephd_buf_appends(out, ",\"drops\":");
      write_drops(out, q);
      ephd_buf_appends(out, ",\"options\":");
      write_options(out, &q->opts);
      ephd_buf_append(out, "}", 1);
    }
  }
  ephd_buf_appends(out, "],\"count\":");
  ephd_buf_append_u64(out, count);
  ephd_buf_appends(out, ",\"cellBytes\":");
  ephd_buf_append_u64(out, ephd_engine_cell_bytes(engine));
  ephd_buf_append(out, "}", 1);
  ephd_http_end(c);
}

int ephd_depth(const ephd_request_t *req, const char *tenant, size_t tenant_len,
               const char *queue, size_t queue_len, const char *group,
               size_t group_len) {
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, queue, queue_len);
  if (q == NULL)
    return EPHD_E_NOT_FOUND;
  ephd_engine_expire(engine, q, now_ms());
  uint32_t g = UINT32_MAX;
  if (group && !ephd_queue_group_find(q, group, group_len, &g))
    g = UINT32_MAX;
  ephd_conn_t *c = ephd_http_conn(req);
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"queue\":");
  ephd_json_write_string(out, q->name, q->name_len);
  ephd_buf_appends(out, ",\"group\":");
  if (group)
    ephd_json_write_string(out, group, group_len);
  else
    ephd_buf_appends(out, "null");
  ephd_buf_appends(out, q->declared ? ",\"tier\":\"declared\",\"pending\":"
                                    : ",\"tier\":\"implicit\",\"pending\":");
  /* With a group, pending is that group's unsettled messages; a group never
   * seen yet would start at the heads, so everything in memory is pending. */
  uint64_t pending = 0, parts_pending = 0;
  for (uint32_t i = 0; i < q->nrings; i++) {
    const ephd_ring_t *r = q->rings[i];
    uint64_t p = g == UINT32_MAX ? ephd_ring_depth(r)
                                 : ephd_ring_pending(r, &r->cursors[g]);
    pending += p;
    if (p)
      parts_pending++;
  }
  ephd_buf_append_u64(out, pending);
  ephd_buf_appends(out, ",\"partitionsPending\":");
  ephd_buf_append_u64(out, parts_pending);
  ephd_buf_appends(out, ",\"bytes\":");
  ephd_buf_append_u64(out, q->bytes);
  ephd_buf_appends(out, ",\"partitions\":[");
  for (uint32_t i = 0; i < q->nrings; i++) {
    const ephd_ring_t *r = q->rings[i];
    if (i)
      ephd_buf_append(out, ",", 1);
    ephd_buf_appends(out, "{\"partition\":");
    ephd_json_write_string(out, r->name, r->name_len);
    ephd_buf_appends(out, ",\"pending\":");
    ephd_buf_append_u64(out, g == UINT32_MAX
                                 ? ephd_ring_depth(r)
                                 : ephd_ring_pending(r, &r->cursors[g]));
    ephd_buf_appends(out, ",\"bytes\":");
    ephd_buf_append_u64(out, r->bytes);
    ephd_buf_append(out, "}", 1);
  }
  ephd_buf_appends(out, "],\"groups\":[");
  int first = 1;
  for (uint32_t gi = 0; gi < q->ngroups; gi++) {
    if (q->groups[gi]->len == 0)
      continue;
    uint64_t gp = 0, skipped = 0;
    for (uint32_t i = 0; i < q->nrings; i++) {
      gp += ephd_ring_pending(q->rings[i], &q->rings[i]->cursors[gi]);
      skipped += q->rings[i]->cursors[gi].skipped;
    }
    if (!first)
      ephd_buf_append(out, ",", 1);
    first = 0;
    ephd_buf_appends(out, "{\"group\":");
    ephd_json_write_string(out, q->groups[gi]->name, q->groups[gi]->len);
    ephd_buf_appends(out, ",\"pending\":");
    ephd_buf_append_u64(out, gp);
    ephd_buf_appends(out, ",\"skipped\":");
    ephd_buf_append_u64(out, skipped);
    ephd_buf_append(out, "}", 1);
  }
  ephd_buf_appends(out, "]}");
  ephd_http_end(c);
  return EPHD_OK;
}
