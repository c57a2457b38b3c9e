/* The hot bodies, push and ack, scanned in C so payload bytes never pass
 * through Lua: one skeleton walks the body's object (a queue, a second
 * name, an array of items) and each verb adds how one item is read. What a
 * scan finds goes into the request's operation, for its commit. */
#include "scan.h"

#include <stdio.h>
#include <string.h>

#include "json.h"
#include "op.h"

typedef struct body_shape body_shape_t;

struct body_shape {
  const char *verb;   /* "a push", "an ack": for the unknown-field message */
  const char *second; /* the other name: "partition" or "group" */
  size_t second_len;
  int second_is_group; /* a null group is queue mode, as when absent */
  const char *array;   /* the items: "messages" or "acks" */
  size_t array_len;
  const char *bad_array;
  const char *bad_item; /* an item that is not an object */
  /* Reads one item's members, p just past its '{'; returns the position
   * after its '}', or NULL (with the scan's message set, or the array's
   * message is given). */
  const char *(*item)(ephd_op_state_t *op, const char *base, const char *p,
                      const char *end);
};

static int fail(ephd_scan_t *s, const char *text) {
  snprintf(s->message, sizeof(s->message), "%s", text);
  return EPHD_E_BAD_REQUEST;
}

static int key_eq(ephd_slice_t key, const char *name, size_t len) {
  return key.len == len && memcmp(key.ptr, name, len) == 0;
}

/* A literal's length is known once this is inlined. */
static inline int key_is(ephd_slice_t key, const char *name) {
  return key_eq(key, name, strlen(name));
}

/* How much of a decoded key a message quotes: at most 64 bytes, cut before
 * a character rather than inside one, so the answer stays UTF-8. */
static int shown(ephd_slice_t key) {
  size_t n = key.len > 64 ? 64 : key.len;
  while (n < key.len && n > 0 && ((unsigned char)key.ptr[n] & 0xC0) == 0x80)
    n--;
  return (int)n;
}

/* A decoded string appended to the operation's names; its slice is set
 * once the scan is done, since names may move as it grows. */
typedef struct {
  size_t off, len;
} name_t;

/* at (unless NULL): where the name lies in the body (base), inside its
 * quotes, when its decoding took every byte as it is (an escape always
 * shortens it); 0 otherwise. */
static const char *name_value(ephd_op_state_t *op, const char *base,
                              const char *p, const char *end, name_t *name,
                              uint32_t *at) {
  if (p >= end || *p != '"') return NULL;
  const char *open = p;
  name->off = op->names.len;
  p = ephd_json_string(p, end, &op->names);
  name->len = op->names.len - name->off;
  if (at)
    *at = p && (size_t)(p - open) == name->len + 2 ? (uint32_t)(open + 1 - base)
                                                   : 0;
  return p;
}

static ephd_slice_t slice_of(const ephd_op_state_t *op, name_t name) {
  ephd_slice_t s = {name.len ? op->names.base + name.off : "", name.len};
  return s;
}

static const char *scan_items(ephd_op_state_t *op, const body_shape_t *shape,
                              const char *base, const char *p,
                              const char *end) {
  if (p >= end || *p != '[') return NULL;
  p = ephd_json_ws(p + 1, end);
  if (p < end && *p == ']') return p + 1;
  for (;;) {
    if (p >= end || *p != '{') {
      fail(&op->pub.scan, shape->bad_item);
      return NULL;
    }
    p = shape->item(op, base, p + 1, end);
    if (p == NULL) return NULL;
    p = ephd_json_ws(p, end);
    if (p < end && *p == ']') return p + 1;
    if (p >= end || *p != ',') return NULL;
    p = ephd_json_ws(p + 1, end);
  }
}

/* Why a refused body was refused, when the reason is its encoding: the
 * scanner stops at the first string that is not UTF-8 without knowing it
 * will be refused, so the whole body is checked again, on this path only. */
static int explain_encoding(const ephd_request_t *req, ephd_scan_t *s) {
  if (ephd_ffi_utf8_valid(req->body.ptr, req->body.len) == EPHD_OK) return 0;
  fail(s,
       "the body is not UTF-8: every string must be strict "
       "UTF-8 (RFC 3629)");
  return 1;
}

/* The same for its syntax: a body cut short inside `messages` stops the
 * scan where an item was expected, which is not the array's fault. Said
 * with the byte where reading failed, counted from 0. */
static void explain_syntax(const ephd_request_t *req, ephd_scan_t *s) {
  const char *end = req->body.ptr + req->body.len;
  const char *at = ephd_json_broken(req->body.ptr, end);
  if (at == NULL) return;
  if (at == end)
    snprintf(s->message, sizeof(s->message),
             "the body is not valid JSON: it ends at byte %zu, inside a "
             "value (cut short?)",
             req->body.len);
  else
    snprintf(s->message, sizeof(s->message),
             "the body is not valid JSON at byte %zu",
             (size_t)(at - req->body.ptr));
}

static int scan_object(ephd_op_state_t *op, const body_shape_t *shape,
                       const char *base, const char *end) {
  ephd_scan_t *s = &op->pub.scan;
  ephd_slice_t key;
  ephd_slice_t *second = shape->second_is_group ? &s->group : &s->partition;
  int *has_second = shape->second_is_group ? &s->has_group : &s->has_partition;
  name_t queue = {0, 0}, other = {0, 0};
  const char *p = ephd_json_ws(base, end);
  int first = 1, r, has_items = 0;
  if (p >= end || *p != '{') return fail(s, "the body must be a JSON object");
  p++;
  while ((r = ephd_json_member(&p, end, &op->key, &key, &first)) == 1) {
    if (key_is(key, "queue") && !s->has_queue) {
      s->has_queue = 1;
      if (!(p = name_value(op, base, p, end, &queue, &op->queue_at)))
        return fail(s, "queue must be a string");
    } else if (key_eq(key, shape->second, shape->second_len) && !*has_second) {
      *has_second = 1;
      if (shape->second_is_group && end - p >= 4 && memcmp(p, "null", 4) == 0) {
        *has_second = 0;
        p += 4;
        continue;
      }
      if (!(p = name_value(op, base, p, end, &other, &op->second_at))) {
        snprintf(s->message, sizeof(s->message), "%s must be a string",
                 shape->second);
        return EPHD_E_BAD_REQUEST;
      }
    } else if (key_eq(key, shape->array, shape->array_len) && !has_items) {
      has_items = 1;
      if (!(p = scan_items(op, shape, base, p, end))) {
        if (!s->message[0]) fail(s, shape->bad_array);
        return EPHD_E_BAD_REQUEST;
      }
    } else {
      snprintf(s->message, sizeof(s->message),
               "unknown or repeated field \"%.*s\": %s has queue, %s and %s",
               shown(key), key.ptr, shape->verb, shape->second, shape->array);
      return EPHD_E_BAD_REQUEST;
    }
  }
  if (r < 0 || ephd_json_ws(p, end) != end)
    return fail(s, "the body is not valid JSON");
  if (!s->has_queue) return fail(s, "queue is required");
  if (!has_items) {
    snprintf(s->message, sizeof(s->message), "%s is required", shape->array);
    return EPHD_E_BAD_REQUEST;
  }
  s->queue = slice_of(op, queue);
  if (*has_second) *second = slice_of(op, other);
  return EPHD_OK;
}

/* A scan's results start empty (the message unset, which is cheaper than
 * clearing it), whether the body or a frame is read. */
static void scan_reset(ephd_op_state_t *op) {
  ephd_scan_t *s = &op->pub.scan;
  memset(s, 0, offsetof(ephd_scan_t, message));
  s->message[0] = 0;
  op->scanned = NULL;
  op->queue_at = op->second_at = 0;
  op->names.len = op->items.len = 0;
}

/* The skeleton: the body is kept for the commit only when it scanned. */
static int scan_body(const ephd_request_t *req, const body_shape_t *shape) {
  ephd_op_state_t *op = ephd_op_of(req);
  ephd_scan_t *s = &op->pub.scan;
  scan_reset(op);
  const char *base = req->body.ptr;
  int rc = scan_object(op, shape, base, base + req->body.len);
  if (rc == EPHD_OK)
    op->scanned = base;
  else if (!explain_encoding(req, s))
    explain_syntax(req, s);
  return rc;
}

/* --- push: {"queue", "partition", "messages": [{"payload"}...]} -------- */

/* A payload's span of the body, for the commit. */
static void add_message(ephd_op_state_t *op, uint32_t off, uint32_t len) {
  ephd_buf_t *items = &op->items;
  if (items->cap - items->len < sizeof(ephd_span_t))
    ephd_buf_reserve(items, sizeof(ephd_span_t));
  ephd_span_t *span = (ephd_span_t *)(items->base + items->len);
  items->len += sizeof(*span);
  span->off = off;
  span->len = len;
  op->pub.scan.count++;
  op->pub.scan.bytes += len;
}

static const char *scan_message(ephd_op_state_t *op, const char *base,
                                const char *p, const char *end) {
  ephd_scan_t *s = &op->pub.scan;
  uint32_t max = ephd_ffi_config()->max_items;
  int first = 1, seen = 0, r;
  ephd_slice_t key;
  while ((r = ephd_json_member(&p, end, &op->key, &key, &first)) == 1) {
    if (!key_is(key, "payload") || seen) {
      fail(s, "each message is {payload} and nothing else");
      return NULL;
    }
    const char *v = p;
    p = ephd_json_skip(p, end);
    if (p == NULL) return NULL;
    seen = 1;
    if (s->count == max) {
      snprintf(s->message, sizeof(s->message), "at most %u messages per push",
               max);
      return NULL;
    }
    add_message(op, (uint32_t)(v - base), (uint32_t)(p - v));
  }
  if (r < 0) return NULL;
  if (!seen) {
    fail(s, "a message needs a payload");
    return NULL;
  }
  return p;
}

static const body_shape_t PUSH = {
    .verb = "a push",
    .second = "partition",
    .second_len = sizeof("partition") - 1,
    .array = "messages",
    .array_len = sizeof("messages") - 1,
    .bad_array = "messages must be an array of {payload}",
    .bad_item = "each message must be an object {payload}",
    .item = scan_message,
};

/* Whether a decoded name is one validate.name takes: present, within the
 * bound, and free of control characters (C0, DEL, and C1, which UTF-8
 * spells C2 80-9F). Its UTF-8 was checked as it was decoded, so a C2 is
 * followed by a continuation byte (80-BF). */
static int name_clean(ephd_slice_t name, size_t max) {
  if (name.len == 0 || name.len > max) return 0;
  const unsigned char *p = (const unsigned char *)name.ptr;
  for (size_t i = 0; i < name.len; i++) {
    unsigned b = p[i];
    if (b - 32u < 95u) continue; /* printable ASCII */
    if (b < 128) return 0;       /* C0 or DEL */
    /* A name from a frame was not decoded here: its last byte is not
     * known to be followed by another. */
    if (b == 0xC2 && (i + 1 == name.len || p[i + 1] < 0xA0)) return 0;
  }
  return 1;
}

static void default_partition(ephd_scan_t *s) {
  if (s->has_partition) return;
  s->partition.ptr = EPHD_DEFAULT_PARTITION;
  s->partition.len = sizeof(EPHD_DEFAULT_PARTITION) - 1;
}

static int names_clean(const ephd_scan_t *s) {
  size_t max = ephd_ffi_config()->max_name_bytes;
  return name_clean(s->queue, max) && name_clean(s->partition, max);
}

int ephd_ffi_push_scan(const ephd_request_t *req) {
  ephd_op_state_t *op = ephd_op_of(req);
  if (op->frame.len && ephd_scan_frame_read(req, op->frame) == EPHD_OK)
    return EPHD_OK;
  int rc = scan_body(req, &PUSH);
  ephd_scan_t *s = &op->pub.scan;
  default_partition(s);
  s->names_clean = rc == EPHD_OK && names_clean(s);
  return rc;
}

/* --- the scan's frame (scan.h) ------------------------------------------- */

static char *put_span(char *p, uint32_t off, uint32_t len) {
  p += ephd_u64_format(p, off);
  *p++ = ':';
  return p + ephd_u64_format(p, len);
}

size_t ephd_scan_frame(const ephd_request_t *req, char *out) {
  const ephd_op_state_t *op = ephd_op_of(req);
  const ephd_scan_t *s = &op->pub.scan;
  if (op->scanned == NULL || !s->names_clean || s->count == 0 ||
      s->count > EPHD_FRAME_MAX || op->queue_at == 0 ||
      (s->has_partition && op->second_at == 0))
    return 0;
  char *p = out;
  memcpy(p, EPHD_FRAME_NAME, sizeof(EPHD_FRAME_NAME) - 1);
  p = put_span(p + sizeof(EPHD_FRAME_NAME) - 1, op->queue_at,
               (uint32_t)s->queue.len);
  *p++ = ' ';
  if (s->has_partition)
    p = put_span(p, op->second_at, (uint32_t)s->partition.len);
  else
    *p++ = '-';
  const ephd_span_t *m = (const ephd_span_t *)op->items.base;
  for (uint32_t i = 0; i < s->count; i++) {
    *p++ = i ? ',' : ' ';
    p = put_span(p, m[i].off, m[i].len);
  }
  *p++ = '\r';
  *p++ = '\n';
  return (size_t)(p - out);
}

/* Up to ten digits, within a uint32_t. */
static const char *read_number(const char *p, const char *end, uint32_t *v) {
  const char *start = p, *stop = end - p > 10 ? p + 10 : end;
  uint64_t n = 0;
  for (unsigned d; p < stop && (d = (unsigned char)*p - '0') <= 9u; p++)
    n = n * 10 + d;
  if (p == start || n > UINT32_MAX) return NULL;
  *v = (uint32_t)n;
  return p;
}

/* OFF:LEN, within the body's len bytes. */
static const char *read_span(const char *p, const char *end, size_t len,
                             ephd_span_t *span) {
  if (!(p = read_number(p, end, &span->off)) || p >= end || *p++ != ':' ||
      !(p = read_number(p, end, &span->len)))
    return NULL;
  return (uint64_t)span->off + span->len <= len ? p : NULL;
}

static int frame_refused(ephd_op_state_t *op) {
  op->items.len = 0;
  return EPHD_E_BAD_REQUEST;
}

int ephd_scan_frame_read(const ephd_request_t *req, ephd_slice_t frame) {
  ephd_op_state_t *op = ephd_op_of(req);
  ephd_scan_t *s = &op->pub.scan;
  const char *body = req->body.ptr, *p = frame.ptr, *end = p + frame.len;
  size_t len = req->body.len;
  uint32_t max = ephd_ffi_config()->max_items;
  if (max > EPHD_FRAME_MAX) max = EPHD_FRAME_MAX;
  scan_reset(op);
  ephd_span_t queue, partition, m;
  if (!(p = read_span(p, end, len, &queue)) || p >= end || *p++ != ' ')
    return frame_refused(op);
  s->has_partition = p >= end || *p != '-';
  if (!s->has_partition)
    p++;
  else if (!(p = read_span(p, end, len, &partition)))
    return frame_refused(op);
  for (char sep = ' '; p < end; sep = ',') {
    if (*p++ != sep || s->count == max || !(p = read_span(p, end, len, &m)))
      return frame_refused(op);
    add_message(op, m.off, m.len);
  }
  s->has_queue = 1;
  s->queue = (ephd_slice_t){body + queue.off, queue.len};
  if (s->has_partition)
    s->partition = (ephd_slice_t){body + partition.off, partition.len};
  default_partition(s);
  if (s->count == 0 || !names_clean(s)) return frame_refused(op);
  s->names_clean = 1;
  /* Where the names lie, as the scan would have left them, not as the
   * operation's last user did: what ephd_scan_frame frames. */
  op->queue_at = queue.off;
  op->second_at = s->has_partition ? partition.off : 0;
  op->scanned = body;
  return EPHD_OK;
}

/* --- ack: {"queue", "group", "acks": [{"id", "status", "error"}...]} ---- */

/* A string member's value, decoded into the operation's value buffer. */
static const char *string_value(ephd_op_state_t *op, const char *p,
                                const char *end) {
  op->value.len = 0;
  if (p >= end || *p != '"') return NULL;
  return ephd_json_string(p, end, &op->value);
}

static const char *scan_ack(ephd_op_state_t *op, const char *base,
                            const char *p, const char *end) {
  ephd_scan_t *s = &op->pub.scan;
  int first = 1, r, has_id = 0, has_status = 0, has_error = 0;
  ephd_ack_item_t item = {0, 0, EPHD_ACK_COMPLETED};
  ephd_slice_t key;
  while ((r = ephd_json_member(&p, end, &op->key, &key, &first)) == 1) {
    if (key_is(key, "id") && !has_id) {
      has_id = 1;
      name_t id;
      if (!(p = name_value(op, base, p, end, &id, NULL))) {
        fail(s, "an ack id must be a string");
        return NULL;
      }
      item.off = (uint32_t)id.off;
      item.len = (uint32_t)id.len;
    } else if (key_is(key, "status") && !has_status) {
      has_status = 1;
      if (!(p = string_value(op, p, end))) {
        fail(s, "an ack status must be a string");
        return NULL;
      }
      ephd_slice_t status = {op->value.base, op->value.len};
      if (key_is(status, "completed"))
        item.status = EPHD_ACK_COMPLETED;
      else if (key_is(status, "failed"))
        item.status = EPHD_ACK_FAILED;
      else if (key_is(status, "retry"))
        item.status = EPHD_ACK_RETRY;
      else {
        fail(s, "status is completed, failed or retry");
        return NULL;
      }
    } else if (key_is(key, "error") && !has_error) {
      has_error = 1;
      if (!(p = string_value(op, p, end))) {
        fail(s, "an ack error must be a string");
        return NULL;
      }
    } else {
      fail(s, "an ack is {id, status, error} and nothing else");
      return NULL;
    }
  }
  if (r < 0) return NULL;
  if (!has_id) {
    fail(s, "each ack needs an id");
    return NULL;
  }
  uint32_t max = ephd_ffi_config()->max_items;
  if (s->count == max) {
    snprintf(s->message, sizeof(s->message), "at most %u acks per call", max);
    return NULL;
  }
  ephd_buf_append(&op->items, &item, sizeof(item));
  s->count++;
  return p;
}

static const body_shape_t ACK = {
    .verb = "an ack",
    .second = "group",
    .second_len = sizeof("group") - 1,
    .second_is_group = 1,
    .array = "acks",
    .array_len = sizeof("acks") - 1,
    .bad_array = "acks must be an array",
    .bad_item = "each ack must be an object {id, status}",
    .item = scan_ack,
};

int ephd_ffi_ack_scan(const ephd_request_t *req) {
  return scan_body(req, &ACK);
}
