/* commitOnDelivery across the cell: see delivery.h. */
#include "delivery.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "mark.h"

static const char ACK_PATH[] = "/api/v1/ephemeral/ack";
static const char JSON_CT[] = "Content-Type: application/json\r\n";

int ephd_delivery_commits(const char *k, size_t n) {
  return (n == 16 && memcmp(k, "commitOnDelivery", 16) == 0) ||
         (n == 7 && memcmp(k, "autoAck", 7) == 0);
}

char *ephd_delivery_query(char *p, ephd_slice_t query, int first,
                          int (*drop)(const char *k, size_t n)) {
  const char *q = query.ptr, *end = q + query.len;
  while (q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    if (amp == NULL) amp = end;
    const char *eq = memchr(q, '=', (size_t)(amp - q));
    size_t klen = (size_t)((eq ? eq : amp) - q);
    if (amp > q && !(drop && drop(q, klen))) {
      *p++ = first ? '?' : '&';
      first = 0;
      memcpy(p, q, (size_t)(amp - q));
      p += amp - q;
    }
    q = amp + 1;
  }
  return p;
}

int ephd_delivery_read(const ephd_peer_response_t *res, ephd_buf_t *ids,
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

void ephd_delivery_ack(ephd_peer_t *peer, const char *tenant, size_t tenant_len,
                       const char *queue, size_t queue_len, const char *group,
                       size_t group_len, const ephd_buf_t *ids,
                       uint64_t timeout_ms) {
  if (peer == NULL) return;
  ephd_buf_t body;
  ephd_buf_init(&body);
  ephd_buf_appends(&body, "{\"queue\":");
  ephd_json_write_string(&body, queue, queue_len);
  if (group) {
    ephd_buf_appends(&body, ",\"group\":");
    ephd_json_write_string(&body, group, group_len);
  }
  ephd_buf_appends(&body, ",\"acks\":[");
  ephd_buf_append(&body, ids->base, ids->len);
  ephd_buf_appends(&body, "]}");
  size_t clen = sizeof(JSON_CT) - 1, hlen = clen + ephd_mark_size(tenant_len);
  char *h = malloc(hlen);
  ephd_slice_t method = {"POST", 4}, target = {ACK_PATH, sizeof(ACK_PATH) - 1};
  if (h) {
    memcpy(h, JSON_CT, clen);
    ephd_mark_write(h + clen, tenant, tenant_len);
    ephd_peer_request_t rq = {
        .method = method,
        .target = target,
        .headers = {h, hlen},
        .body = {body.base, body.len},
        .timeout_ms = timeout_ms,
    };
    ephd_peer_call_t *call;
    ephd_peer_send(peer, &rq, ephd_peer_ignore, NULL, &call);
  }
  free(h);
  ephd_buf_free(&body);
}
