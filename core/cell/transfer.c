/* A partition on the wire: see transfer.h. */
#include "transfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[] = "ephd-transfer 1\n";

static void put_u64(ephd_buf_t *out, uint64_t n, char sep) {
  ephd_buf_append_u64(out, n);
  ephd_buf_append(out, &sep, 1);
}

/* A group's redeliveries still pointing at messages the ring holds. */
static uint32_t live_redo(const ephd_ring_t *r, const ephd_cursor_t *c) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->redo_len; i++)
    n += c->redo[(c->redo_head + i) % c->redo_cap].pos >= r->head;
  return n;
}

uint64_t ephd_transfer_write(ephd_buf_t *out, const ephd_queue_t *q,
                             const ephd_ring_t *r, uint64_t now_ms) {
  uint64_t n = r->tail - r->head;
  ephd_buf_appends(out, MAGIC);
  put_u64(out, q->name_len, ' ');
  put_u64(out, r->name_len, ' ');
  put_u64(out, n, ' ');
  put_u64(out, q->ngroups, '\n');
  ephd_buf_append(out, q->name, q->name_len);
  ephd_buf_append(out, r->name, r->name_len);
  ephd_buf_append(out, "\n", 1);
  for (uint64_t pos = r->head; pos < r->tail; pos++) {
    const ephd_msg_t *m = ephd_ring_at(r, pos);
    put_u64(out, now_ms > m->enqueued_ms ? now_ms - m->enqueued_ms : 0, ' ');
    put_u64(out, m->len, '\n');
    ephd_buf_append(out, m->payload, m->len);
    ephd_buf_append(out, "\n", 1);
  }
  for (uint32_t g = 0; g < q->ngroups; g++) {
    const ephd_group_t *group = q->groups[g];
    const ephd_cursor_t *c = &r->cursors[g];
    uint64_t next = c->next < r->head ? r->head : c->next;
    put_u64(out, group->len, ' ');
    put_u64(out, next - r->head, ' ');
    put_u64(out, live_redo(r, c) + c->leases.count, '\n');
    ephd_buf_append(out, group->name, group->len);
    ephd_buf_append(out, "\n", 1);
    for (uint32_t i = 0; i < c->redo_len; i++) {
      const ephd_redelivery_t *d = &c->redo[(c->redo_head + i) % c->redo_cap];
      if (d->pos < r->head) continue;
      put_u64(out, d->pos - r->head, ' ');
      put_u64(out, d->attempts, '\n');
    }
    size_t at = 0;
    const ephd_lease_t *l;
    while ((l = ephd_map_next(&c->leases, &at))) {
      put_u64(out, l->pos - r->head, ' ');
      put_u64(out, (uint64_t)l->attempts + 1, '\n');
    }
  }
  return n;
}

/* --- reading --------------------------------------------------------- */

typedef struct {
  const char *p, *end;
} reader_t;

/* A decimal up to max, then sep. */
static int get_u64(reader_t *rd, uint64_t max, char sep, uint64_t *out) {
  uint64_t n = 0;
  const char *start = rd->p;
  while (rd->p < rd->end && *rd->p >= '0' && *rd->p <= '9') {
    uint64_t d = (uint64_t)(*rd->p - '0');
    if (d > max || n > (max - d) / 10) return -1;
    n = n * 10 + d;
    rd->p++;
  }
  if (rd->p == start || rd->p - start > 20 || rd->p >= rd->end || *rd->p != sep)
    return -1;
  rd->p++;
  *out = n;
  return 0;
}

/* len bytes, then a newline; their offset in the body. */
static int get_bytes(reader_t *rd, const char *base, uint64_t len,
                     uint32_t *off) {
  if ((uint64_t)(rd->end - rd->p) < len + 1 || rd->p[len] != '\n') return -1;
  *off = (uint32_t)(rd->p - base);
  rd->p += len + 1;
  return 0;
}

static int fail(const char **why, const char *reason) {
  *why = reason;
  return -1;
}

int ephd_transfer_parse(const char *body, size_t len, size_t max_name,
                        ephd_transfer_t *t, const char **why) {
  memset(t, 0, sizeof(*t));
  t->base = body;
  if (len > UINT32_MAX) return fail(why, "the transfer is too large");
  reader_t rd = {body, body + len};
  size_t magic = sizeof(MAGIC) - 1;
  if (len < magic || memcmp(body, MAGIC, magic) != 0)
    return fail(why, "not an ephd-transfer 1 body");
  rd.p += magic;
  uint64_t ql, pl, nmsgs, ngroups;
  /* Every message and group takes at least four bytes of the body: the
   * counts are bounded by it before anything is allocated. */
  uint64_t most = len / 4;
  if (get_u64(&rd, max_name, ' ', &ql) || get_u64(&rd, max_name, ' ', &pl) ||
      get_u64(&rd, most, ' ', &nmsgs) || get_u64(&rd, most, '\n', &ngroups) ||
      ql == 0 || pl == 0)
    return fail(why, "a malformed transfer header");
  if ((uint64_t)(rd.end - rd.p) < ql + pl + 1 || rd.p[ql + pl] != '\n')
    return fail(why, "a malformed transfer header");
  t->queue_off = (uint32_t)(rd.p - body);
  t->queue_len = (uint32_t)ql;
  t->partition_off = t->queue_off + (uint32_t)ql;
  t->partition_len = (uint32_t)pl;
  rd.p += ql + pl + 1;
  t->msgs = calloc(nmsgs ? nmsgs : 1, sizeof(*t->msgs));
  t->groups = calloc(ngroups ? ngroups : 1, sizeof(*t->groups));
  if (t->msgs == NULL || t->groups == NULL) {
    ephd_transfer_free(t);
    return fail(why, "out of memory");
  }
  for (uint64_t i = 0; i < nmsgs; i++) {
    ephd_transfer_msg_t *m = &t->msgs[i];
    uint64_t plen;
    if (get_u64(&rd, UINT64_MAX >> 1, ' ', &m->age_ms) ||
        get_u64(&rd, UINT32_MAX, '\n', &plen) ||
        get_bytes(&rd, body, plen, &m->off)) {
      ephd_transfer_free(t);
      return fail(why, "a malformed message");
    }
    m->len = (uint32_t)plen;
    t->bytes += plen;
    t->nmsgs++;
  }
  uint32_t redo_cap = 0;
  for (uint64_t i = 0; i < ngroups; i++) {
    ephd_transfer_group_t *g = &t->groups[i];
    uint64_t glen, next, nredo;
    if (get_u64(&rd, max_name, ' ', &glen) || get_u64(&rd, nmsgs, ' ', &next) ||
        get_u64(&rd, most, '\n', &nredo) ||
        get_bytes(&rd, body, glen, &g->name_off)) {
      ephd_transfer_free(t);
      return fail(why, "a malformed group");
    }
    g->name_len = (uint32_t)glen;
    g->next = (uint32_t)next;
    g->redo_first = t->nredo;
    for (uint64_t k = 0; k < nredo; k++) {
      uint64_t index, attempts;
      if (nmsgs == 0 || get_u64(&rd, nmsgs - 1, ' ', &index) ||
          get_u64(&rd, UINT32_MAX, '\n', &attempts)) {
        ephd_transfer_free(t);
        return fail(why, "a malformed redelivery");
      }
      if (t->nredo == redo_cap) {
        redo_cap = redo_cap ? redo_cap * 2 : 16;
        ephd_transfer_redo_t *grown =
            realloc(t->redo, (size_t)redo_cap * sizeof(*t->redo));
        if (grown == NULL) {
          ephd_transfer_free(t);
          return fail(why, "out of memory");
        }
        t->redo = grown;
      }
      t->redo[t->nredo++] =
          (ephd_transfer_redo_t){(uint32_t)index, (uint32_t)attempts};
    }
    g->nredo = t->nredo - g->redo_first;
    t->ngroups++;
  }
  if (rd.p != rd.end) {
    ephd_transfer_free(t);
    return fail(why, "bytes after the transfer");
  }
  return 0;
}

void ephd_transfer_free(ephd_transfer_t *t) {
  free(t->msgs);
  free(t->groups);
  free(t->redo);
  t->msgs = NULL;
  t->groups = NULL;
  t->redo = NULL;
}
