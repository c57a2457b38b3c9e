#include "members.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "ffi.h"
#include "log.h"
#include "mark.h"
#include "peer_client.h"
#include "pg.h"

/* A row of the last read: a member, live or not. Placement's view holds
 * this broker and every member live by its row, ready (its listener
 * answered as that member) and not leaving (it said it stops). ready,
 * probing and leaving carry over from read to read, by id. */
typedef struct {
  ephd_member_t m;
  int live;
  int ready, probing, leaving;
  int promised;    /* told it that this broker stays: its hand-over may come */
  uint64_t ttl_ms; /* the member's own */
  uint64_t age_ms; /* since its last beat, by the database's clock */
} row_t;

static uv_loop_t *loop;
static ephd_engine_t *engine;
static const char *token; /* the cell token: the rows' MAC key; NULL: none */
static int database;
static uint64_t ttl_ms;
static ephd_member_t self;
static char self_id[17], self_epoch[12], self_ttl[24];
static char self_mac[65];

/* The last read: every row, and the live ones as placement's view. Before
 * the first read, and for good without a database, both are this broker
 * alone: a cell of one. */
static row_t *rows;
static uint32_t nrows, self_row;
static ephd_member_t *live;
static ephd_view_t view;
static uint64_t read_ms; /* when the beat of the last read was sent */
static int ever_read, stale;

static uv_timer_t beat_timer, leave_timer, boot_timer;
static uint64_t beat_ms; /* when the beat in flight was sent */
static int beating, taken_over, failing, boot_over;
/* When a beat last failed (or could not be sent): the database has been
 * reachable to this broker since, which bounds every age it is told. */
static uint64_t failed_ms;
static int ever_failed;

/* The rows ignored at the last read, as hashes of their id and why,
 * sorted, so each is logged once, not at every beat: anybody may write
 * the table, so a read of many rows costs a search each, not a scan. */
static uint64_t *ignored;
static uint32_t nignored;
/* Rows logged as ignored at one read; past it, one line counts the rest
 * (a table filled with rows must not fill the log too). */
#define IGNORED_LOGGED 8
static int leaving;
static int going;      /* stopping: the leaving notice is sent */
static int read_going; /* the beat out began once going */
static uint64_t await_ms;
static void (*on_left)(void);
static void (*on_change)(const ephd_member_t *was, uint32_t nwas,
                         const ephd_view_t *view);

/* The stop under way: the members told, whether each answered as staying,
 * and the view of those that did, the hand-over's. */
static ephd_member_t *told;
static uint8_t *staying;
static uint32_t ntold, told_out;
static ephd_member_t *kept;
static ephd_view_t after;
static uv_timer_t told_timer;
static enum { IDLE, READING, AWAITING, TELLING, DRAINING, DONE } phase;
static uint64_t tell_ms, told_ms;
static void (*on_told)(void);

/* One statement, so one round trip a second: this broker's beat, the
 * collection of rows unseen for long (skipping rows another broker is
 * collecting, so two never wait on each other), and every other row with
 * its age by the database's clock. Each row carries the TTL its member
 * beats for, and is judged by it: brokers started with different TTLs
 * still agree on who is live (judged by a shorter TTL than its own, a
 * member beating once a second would drop out of the view between beats,
 * and its partitions move each time). Rows unseen for ten of their TTLs,
 * and at least a minute, are collected: a broker that died shows in the
 * cell's status a while first. The first beat also takes the address over
 * from an earlier incarnation (a crash, then a restart): this one holds
 * the port now, so the old row is certainly dead, and need not stay live
 * for its TTL. The outer SELECT reads the table as it was before the
 * statement, so the beat's row comes from its RETURNING and the collected
 * ones are left out by hand.
 *
 * An age counts only time the database could be reached: it is at most
 * how long the database has been up (pg_postmaster_start_time) and how
 * long this broker's beats have gone through without a failure ($6). Nobody
 * can beat while the database is away, so after an outage every other row
 * looks stale; it is a member's silence while it could have beaten that
 * says it is dead, so each gets its TTL (and the collection window) of a
 * reachable database again before it is judged.
 *
 * The table is read as anybody may have written it: a row's text is read
 * only as far as a member's could go (one character more, to tell it is
 * longer: unreadable), so a row of megabytes costs a beat no more than
 * any other; a last_seen ahead of now() (a hand-written row, or the
 * database's clock stepped back) is seen as just now and clamped to
 * now(), so it ages out like any other rather than staying live for good;
 * 'infinity', '-infinity' and NULL are ages, not errors (an interval from them
 * is out of range, which failed the whole statement and froze every broker's
 * view). */
_Static_assert(EPHD_MEMBER_ADDRESS_MAX == 256,
               "BEAT_SQL reads left(address, 256)");
static const char BEAT_SQL[] =
    "WITH clock AS ("
    " SELECT least($6::bigint, floor(extract(epoch FROM"
    " now() - pg_postmaster_start_time()) * 1000)::bigint) AS up), "
    "beat AS ("
    " INSERT INTO queen.ephemeral_members"
    " (id, address, epoch, ttl_ms, mac, last_seen)"
    " VALUES ($1, $2, $3::bigint, $4::int, nullif($7, ''), now())"
    " ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address,"
    " epoch = EXCLUDED.epoch, ttl_ms = EXCLUDED.ttl_ms, mac = EXCLUDED.mac,"
    " last_seen = now()"
    " RETURNING id, address, epoch, ttl_ms, mac), "
    "seen AS ("
    " SELECT id, address, epoch, ttl_ms, mac,"
    " coalesce(last_seen > now(), false) AS ahead,"
    " least((SELECT up FROM clock), CASE WHEN last_seen >= now() THEN 0"
    "  WHEN isfinite(last_seen) THEN"
    "  floor(extract(epoch FROM now() - last_seen) * 1000)"
    "  ELSE 9000000000000000 END)::bigint AS age,"
    " greatest(60000, 10 * coalesce(ttl_ms, 0)::bigint) AS horizon"
    " FROM queen.ephemeral_members WHERE id <> $1), "
    "taken AS (SELECT id FROM seen WHERE address = $2 AND $5::bool), "
    "ahead AS ("
    " UPDATE queen.ephemeral_members SET last_seen = now() WHERE id IN ("
    "  SELECT id FROM queen.ephemeral_members WHERE id IN ("
    "   SELECT id FROM seen WHERE ahead AND id NOT IN (SELECT id FROM taken))"
    "  FOR UPDATE SKIP LOCKED)"
    " RETURNING id), "
    "gone AS ("
    " DELETE FROM queen.ephemeral_members WHERE id IN ("
    "  SELECT id FROM queen.ephemeral_members WHERE id IN ("
    "   SELECT id FROM seen WHERE age > horizon"
    "   UNION SELECT id FROM taken)"
    "  FOR UPDATE SKIP LOCKED)"
    " RETURNING id) "
    "SELECT id, address, epoch, ttl_ms, 0::bigint, mac FROM beat "
    "UNION ALL "
    "SELECT left(id, 17), left(address, 256), epoch, ttl_ms, age,"
    " left(mac, 65) FROM seen WHERE id NOT IN (SELECT id FROM gone)";

static const char LEAVE_SQL[] =
    "DELETE FROM queen.ephemeral_members WHERE id = $1";

static int fresh(void) {
  return !database || (ever_read && uv_now(loop) - read_ms <= ttl_ms);
}

static void format_id(char out[17], uint64_t id) {
  snprintf(out, 17, "%016" PRIx64, id);
}

/* 16 lowercase hex digits, as format_id writes them. */
static int parse_id(const char *s, int len, uint64_t *id) {
  if (len != 16) return -1;
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *id = v;
  return 0;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
  if (*s < '0' || *s > '9') return -1;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || v > max) return -1;
  *out = v;
  return 0;
}

/* A row's MAC: HMAC-SHA256 keyed with the cell token over its id, address,
 * epoch and TTL, as 64 lowercase hex digits. Only a holder of the token
 * can write a row the others take for a member: the others send that
 * member the token's marks, tenants' payloads and hand-overs. last_seen is
 * left out (every beat would sign it; a forged one only ages out, clamped
 * to the database's now()). */
static void row_mac(const ephd_member_t *m, uint64_t ttl, char out[65]) {
  char msg[EPHD_MEMBER_ADDRESS_MAX + 96];
  int n = snprintf(msg, sizeof(msg),
                   "ephd-member-v1\n%016" PRIx64 "\n%s\n%" PRIu32 "\n%" PRIu64,
                   m->id, m->address, m->epoch, ttl);
  if (ephd_mark_hmac_hex(msg, (size_t)n, out) != 0) abort();
  out[64] = 0;
}

static int mac_ok(const row_t *r, const char *mac, int len) {
  if (token == NULL) return 1; /* nothing is sent to members without one */
  char want[65];
  row_mac(&r->m, r->ttl_ms, want);
  return len == 64 && CRYPTO_memcmp(want, mac, 64) == 0;
}

/* A row as it was written: every column but its age (FNV-1a over each
 * value and its length). A row ignored at the last read with the same
 * key is ignored again without its MAC being computed again. */
static uint64_t row_key(const PGresult *res, int i) {
  static const int cols[] = {0, 1, 2, 3, 5};
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t c = 0; c < sizeof(cols) / sizeof(*cols); c++) {
    const char *v = PQgetvalue(res, i, cols[c]);
    int len = PQgetlength(res, i, cols[c]);
    for (int k = 0; k < len; k++)
      h = (h ^ (unsigned char)v[k]) * 0x100000001b3ULL;
    h = (h ^ (uint64_t)len ^ 0x100) * 0x100000001b3ULL;
  }
  return h;
}

static int by_key(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int ignored_before(uint64_t key) {
  return ignored && bsearch(&key, ignored, nignored, sizeof(key), by_key);
}

/* Logs a row ignored at this read that was not at the last (the first
 * IGNORED_LOGGED of them; *more counts them all), and keeps its key in
 * next for the next read's comparison. */
static void ignore(uint64_t *next, uint32_t *n, uint32_t *more, uint64_t key,
                   const char *id, int len, const char *address, char why) {
  next[(*n)++] = key;
  if ((*more)++ >= IGNORED_LOGGED) return;
  /* Cut short: the row's values are anybody's. */
  char shown[17], where[EPHD_MEMBER_ADDRESS_MAX];
  snprintf(shown, sizeof(shown), "%.*s", len < 16 ? len : 16, id);
  snprintf(where, sizeof(where), "%s", address);
  ephd_log("warn", "member_row_ignored", "id", shown, "address", where,
           "reason", why == 'm' ? "mac" : "unreadable", "msg",
           why == 'm' ? "not signed with this cell's token: not a member"
                      : "a row this broker cannot read: not a member",
           NULL);
}

static int by_id(const void *a, const void *b) {
  uint64_t x = ((const row_t *)a)->m.id, y = ((const row_t *)b)->m.id;
  return x < y ? -1 : x > y;
}

static int in_view(const row_t *r) {
  return r->m.id == self.id || (r->live && r->ready && !r->leaving);
}

/* The view's version (ephd_members_version): FNV-1a over each member's
 * id, epoch and address, in the view's order. Made from what the view
 * holds rather than counted, so brokers holding the same view show the
 * same version, and a client that read two of them can tell they agree. */
static uint64_t version;

#define FNV_PRIME 0x100000001b3ULL

/* n bytes of x, least significant first: the same on every byte order. */
static uint64_t fnv_le(uint64_t h, uint64_t x, int n) {
  for (int i = 0; i < n; i++, x >>= 8) h = (h ^ (x & 0xff)) * FNV_PRIME;
  return h;
}

static uint64_t version_of(const ephd_view_t *v) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t i = 0; i < v->count; i++) {
    const ephd_member_t *m = &v->members[i];
    h = fnv_le(h, m->id, 8);
    h = fnv_le(h, m->epoch, 4);
    const char *a = m->address;
    do /* its NUL ends it */
      h = (h ^ (unsigned char)*a) * FNV_PRIME;
    while (*a++);
  }
  return h;
}

uint64_t ephd_members_version(void) { return version; }

/* Makes the view again from the rows; returns the view's old members for
 * the caller to compare and free. */
static ephd_member_t *rebuild(void) {
  ephd_member_t *was = live;
  live = calloc(nrows ? nrows : 1, sizeof(*live));
  if (live == NULL) abort();
  uint32_t count = 0;
  for (uint32_t i = 0; i < nrows; i++) {
    if (rows[i].m.id == self.id) {
      self_row = i;
      view.self = count;
    }
    if (in_view(&rows[i])) live[count++] = rows[i].m;
  }
  view.members = live;
  view.count = count;
  version = version_of(&view);
  return was;
}

static row_t *find_row(uint64_t id) {
  for (uint32_t i = 0; i < nrows; i++)
    if (rows[i].m.id == id) return &rows[i];
  return NULL;
}

/* Replaces the last read with rows (sorted here, and owned from now on),
 * keeping what was learnt of each member that is still the same (id,
 * address and epoch), and the view with them; returns the view's old
 * members for the caller to compare and free. */
static ephd_member_t *install(row_t *next, uint32_t n) {
  qsort(next, n, sizeof(*next), by_id);
  for (uint32_t i = 0; i < n; i++) {
    row_t *r = &next[i];
    const row_t *old = find_row(r->m.id);
    /* Without a token nothing is ever sent to a member: no probe either. */
    r->ready = token == NULL;
    if (old && old->m.epoch == r->m.epoch &&
        strcmp(old->m.address, r->m.address) == 0) {
      r->ready |= old->ready;
      r->probing = old->probing;
      r->leaving = old->leaving;
      r->promised = old->promised;
    }
  }
  free(rows);
  rows = next;
  nrows = n;
  return rebuild();
}

const ephd_member_t *ephd_members_live(uint64_t id) {
  const row_t *r = find_row(id);
  return r && r->live && !r->leaving && id != self.id ? &r->m : NULL;
}

static const row_t *row_of(const row_t *list, uint32_t n, uint64_t id) {
  for (uint32_t i = 0; i < n; i++)
    if (list[i].m.id == id) return &list[i];
  return NULL;
}

static const char *reason_left(uint64_t id) {
  const row_t *r = row_of(rows, nrows, id);
  return r == NULL ? "gone" : r->leaving ? "leaving" : "unseen";
}

/* One line per member that joined or left this broker's view, by walking
 * both views in id order. A member leaves because its row is gone (it
 * stopped cleanly, or was collected) or because it went unseen. Returns
 * how many joined or left. */
/* Views that took in a member so far (ephd_members_joins). */
static uint64_t joins = 1;

static uint32_t log_changes(const ephd_member_t *was, uint32_t nwas) {
  char id[17], epoch[12], count[12];
  int joined = 0;
  snprintf(count, sizeof(count), "%" PRIu32, view.count);
  uint32_t i = 0, j = 0, changes = 0;
  while (i < nwas || j < view.count) {
    uint64_t a = i < nwas ? was[i].id : UINT64_MAX;
    uint64_t b = j < view.count ? view.members[j].id : UINT64_MAX;
    if (i < nwas && j < view.count && a == b) {
      i++;
      j++;
    } else if (j >= view.count || (i < nwas && a < b)) {
      format_id(id, a);
      ephd_log("info", "member_left", "id", id, "address", was[i].address,
               "reason", reason_left(a), "live", count, NULL);
      i++;
      changes++;
    } else {
      format_id(id, b);
      snprintf(epoch, sizeof(epoch), "%08" PRIx32, view.members[j].epoch);
      ephd_log("info", "member_joined", "id", id, "address",
               view.members[j].address, "epoch", epoch, "live", count, NULL);
      j++;
      changes++;
      joined = 1;
    }
  }
  if (joined) joins++;
  return changes;
}

uint64_t ephd_members_joins(void) { return joins; }

static void tell(void);
static void read_done(void);
static void read_answered(void);
static int promised_pending(void);

/* After the view was made again: its changes logged and told. */
static void changed(ephd_member_t *was, uint32_t nwas) {
  if (log_changes(was, nwas) && on_change) on_change(was, nwas, &view);
  free(was);
}

/* --- readiness: a member gets partitions once its listener answers ---- */

static const char READY_TARGET[] = "/api/v1/ephemeral/ready";
/* Once per member: its connection is not kept in the relay's pool, which
 * is for the relayed requests. */
static const char CLOSE[] = "Connection: close\r\n";

typedef struct {
  uint64_t id;
  uint32_t epoch;
} probe_t;

/* Whether body is the ready answer of member id at epoch: its own id and
 * epoch, as ephd_ffi_cell_ready writes them. Another broker at the address
 * (a restart, a port reused) is not that member. */
static int answers_as(ephd_slice_t body, uint64_t id, uint32_t epoch) {
  char want[80];
  int n =
      snprintf(want, sizeof(want),
               "{\"id\":\"%016" PRIx64 "\",\"epoch\":%" PRIu32 ",", id, epoch);
  return body.len > (size_t)n && memcmp(body.ptr, want, (size_t)n) == 0;
}

static void on_probed(void *data, int result, const ephd_peer_response_t *res) {
  probe_t *p = data;
  row_t *r = find_row(p->id);
  if (r == NULL || r->m.epoch != p->epoch) {
    free(p);
    return;
  }
  r->probing = 0;
  int ok = result == EPHD_PEER_OK && res->status == 200 &&
           answers_as(res->body, p->id, p->epoch);
  free(p);
  if (!ok || r->ready) return; /* tried again at the next beat */
  r->ready = 1;
  uint32_t nwas = view.count;
  changed(rebuild(), nwas);
}

/* Asks each live member not known ready whether its listener answers as
 * it: a row is written at boot, before the broker listens, and placing
 * partitions on it then had their requests fail until it did. */
static void probe_all(void) {
  if (token == NULL || leaving || going) return;
  for (uint32_t i = 0; i < nrows; i++) {
    row_t *r = &rows[i];
    if (r->m.id == self.id || !r->live || r->ready || r->probing || r->leaving)
      continue;
    ephd_peer_t *peer = ephd_peer(r->m.address);
    if (peer == NULL) continue;
    probe_t *p = malloc(sizeof(*p));
    if (p == NULL) abort();
    p->id = r->m.id;
    p->epoch = r->m.epoch;
    ephd_peer_request_t rq = {
        .method = {"GET", 3},
        .target = {READY_TARGET, sizeof(READY_TARGET) - 1},
        .headers = {CLOSE, sizeof(CLOSE) - 1},
        .timeout_ms = ttl_ms,
    };
    ephd_peer_call_t *sent;
    if (ephd_peer_send(peer, &rq, on_probed, p, &sent) != 0) {
      free(p);
      continue;
    }
    r->probing = 1;
  }
}

static int probes_out(void) {
  for (uint32_t i = 0; i < nrows; i++)
    if (rows[i].probing) return 1;
  return 0;
}

static void apply(PGresult *res) {
  int n = PQntuples(res);
  row_t *next = calloc((size_t)n + 1, sizeof(*next));
  uint64_t *skipped = calloc((size_t)n + 1, sizeof(*skipped));
  if (next == NULL || skipped == NULL) abort();
  uint32_t count = 0, nskipped = 0, fresh = 0;
  for (int i = 0; i < n; i++) {
    row_t *r = &next[count];
    uint64_t epoch;
    /* Ignored at the last read as it is now: nothing to check again (a
     * table filled with rows costs a hash and a search a row). */
    uint64_t key = row_key(res, i);
    if (ignored_before(key)) {
      skipped[nskipped++] = key;
      continue;
    }
    const char *id = PQgetvalue(res, i, 0);
    int id_len = PQgetlength(res, i, 0);
    const char *address = PQgetvalue(res, i, 1);
    size_t len = (size_t)PQgetlength(res, i, 1);
    /* A row this broker cannot read, or not signed with the cell's token,
     * is no member it could relay to. */
    if (parse_id(id, id_len, &r->m.id) || len >= sizeof(r->m.address) ||
        parse_u64(PQgetvalue(res, i, 2), UINT32_MAX, &epoch) ||
        parse_u64(PQgetvalue(res, i, 3), UINT32_MAX, &r->ttl_ms) ||
        parse_u64(PQgetvalue(res, i, 4), UINT64_MAX, &r->age_ms)) {
      ignore(skipped, &nskipped, &fresh, key, id, id_len, address, 'u');
      continue;
    }
    memcpy(r->m.address, address, len);
    r->m.address[len] = 0;
    r->m.epoch = (uint32_t)epoch;
    if (r->m.id != self.id &&
        !mac_ok(r, PQgetvalue(res, i, 5), PQgetlength(res, i, 5))) {
      ignore(skipped, &nskipped, &fresh, key, id, id_len, address, 'm');
      continue;
    }
    r->live = r->age_ms <= r->ttl_ms;
    count++;
  }
  if (fresh > IGNORED_LOGGED) {
    char more[16];
    snprintf(more, sizeof(more), "%" PRIu32, fresh - IGNORED_LOGGED);
    ephd_log("warn", "member_rows_ignored", "more", more, "msg",
             "more rows no member wrote than are logged one by one", NULL);
  }
  qsort(skipped, nskipped, sizeof(*skipped), by_key);
  free(ignored);
  ignored = skipped;
  nignored = nskipped;
  if (row_of(next, count, self.id) == NULL) {
    next[count].m = self; /* the beat's own row cannot be missing */
    next[count].ttl_ms = ttl_ms;
    next[count++].live = 1;
  }
  uint32_t nwas = view.count;
  changed(install(next, count), nwas);
  probe_all();
  if (phase == AWAITING && !promised_pending()) tell();
}

static void failed(void) {
  failed_ms = uv_now(loop);
  ever_failed = 1;
}

static void on_beat(void *data, PGresult *res, const char *err) {
  (void)data;
  beating = 0;
  if (leaving) return;
  if (res == NULL) {
    failed();
    /* Once per run of failures: the store logs the outage itself. */
    if (!failing)
      ephd_log("warn", "cell_heartbeat_failed", "reason", err, "msg",
               "keeping the last view of the cell", NULL);
    failing = 1;
    if (phase == READING) read_done();
    return;
  }
  failing = 0;
  apply(res);
  read_ms = beat_ms;
  if (!ever_read) {
    char epoch[12], count[12];
    snprintf(epoch, sizeof(epoch), "%08" PRIx32, self.epoch);
    snprintf(count, sizeof(count), "%" PRIu32, view.count);
    ephd_log("info", "cell_joined", "id", self_id, "address", self.address,
             "epoch", epoch, "live", count, NULL);
  } else if (stale) {
    ephd_log("info", "cell_view_fresh", NULL);
  }
  ever_read = 1;
  stale = 0;
  taken_over = 1;
  read_answered();
}

static void beat(void) {
  if (beating || leaving) return;
  if (!ephd_pg_connected()) {
    failed();
    return;
  }
  /* How long the database has been reachable: for as long as this broker
   * has known it, when no beat ever failed. */
  char up[24];
  snprintf(up, sizeof(up), "%" PRIu64,
           ever_failed ? uv_now(loop) - failed_ms : (uint64_t)INT64_MAX);
  const char *values[7] = {self_id,
                           self.address,
                           self_epoch,
                           self_ttl,
                           taken_over ? "f" : "t",
                           up,
                           token ? self_mac : ""};
  int lengths[7];
  for (int i = 0; i < 7; i++) lengths[i] = (int)strlen(values[i]);
  if (ephd_pg_query(BEAT_SQL, 7, values, lengths, on_beat, NULL) != 0) {
    failed();
    return;
  }
  beating = 1;
  read_going = going;
  beat_ms = uv_now(loop);
}

static void on_tick(uv_timer_t *t) {
  (void)t;
  if (ever_read && !stale && !fresh()) {
    stale = 1;
    ephd_log("warn", "cell_view_stale", "msg",
             "no heartbeat read within the TTL: keeping the last view", NULL);
  }
  beat();
}

void ephd_members_start(uv_loop_t *l, ephd_engine_t *e, uint32_t epoch,
                        const char *advertise, int db, uint64_t ttl,
                        const char *cell_token) {
  loop = l;
  engine = e;
  token = cell_token;
  database = db;
  ttl_ms = ttl;
  /* 64 random bits: unique per incarnation (two members sharing an id
   * would share one row), where the 32-bit epoch, which every message id
   * carries, is too short to count on. */
  if (uv_random(NULL, NULL, &self.id, sizeof(self.id), 0, NULL) != 0)
    self.id = uv_hrtime() ^ ((uint64_t)epoch << 32) ^ (uint64_t)uv_os_getpid();
  self.epoch = epoch;
  snprintf(self.address, sizeof(self.address), "%s", advertise);
  format_id(self_id, self.id);
  snprintf(self_epoch, sizeof(self_epoch), "%" PRIu32, epoch);
  snprintf(self_ttl, sizeof(self_ttl), "%" PRIu64, ttl_ms);
  if (token) row_mac(&self, ttl_ms, self_mac);
  row_t *alone = calloc(1, sizeof(*alone));
  if (alone == NULL) abort();
  alone->m = self;
  alone->ttl_ms = ttl_ms;
  alone->live = 1;
  install(alone, 1);
  read_ms = uv_now(loop);
  if (!database) return;
  uint64_t every = ttl_ms / 4 < 1000 ? ttl_ms / 4 : 1000;
  uv_timer_init(loop, &beat_timer);
  uv_timer_start(&beat_timer, on_tick, every, every);
  uv_unref((uv_handle_t *)&beat_timer);
  uv_timer_init(loop, &leave_timer);
}

static void on_boot_deadline(uv_timer_t *t) {
  (void)t;
  boot_over = 1;
}

void ephd_members_boot(uint64_t timeout_ms) {
  if (!database) return;
  beat();
  if (!beating) return;
  uv_timer_init(loop, &boot_timer);
  uv_timer_start(&boot_timer, on_boot_deadline, timeout_ms, 0);
  /* The read, then the answers of the members it found: the broker starts
   * serving knowing which of them are there. */
  while ((beating || probes_out()) && !boot_over) uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&boot_timer, NULL);
  uv_run(loop, UV_RUN_NOWAIT); /* let the close complete */
}

const ephd_view_t *ephd_members_view(void) { return &view; }

static void left(void) {
  void (*done)(void) = on_left;
  on_left = NULL;
  if (database) uv_timer_stop(&leave_timer);
  if (done) done();
}

static void on_deleted(void *data, PGresult *res, const char *err) {
  (void)data;
  if (on_left == NULL) return; /* the deadline came first */
  if (res)
    ephd_log("info", "cell_left", "id", self_id, NULL);
  else
    ephd_log("warn", "cell_leave_failed", "id", self_id, "reason", err, "msg",
             "the others count this broker until the TTL", NULL);
  left();
}

static void on_leave_deadline(uv_timer_t *t) {
  (void)t;
  ephd_log("warn", "cell_leave_failed", "id", self_id, "reason",
           "the database did not answer in time", "msg",
           "the others count this broker until the TTL", NULL);
  left();
}

void ephd_members_leave(uint64_t timeout_ms, void (*done)(void)) {
  on_left = done;
  if (!database || leaving) {
    left();
    return;
  }
  leaving = 1;
  uv_timer_stop(&beat_timer);
  const char *values[1] = {self_id};
  int lengths[1] = {16};
  if (ephd_pg_query(LEAVE_SQL, 1, values, lengths, on_deleted, NULL) != 0) {
    left();
    return;
  }
  uv_timer_start(&leave_timer, on_leave_deadline, timeout_ms, 0);
}

void ephd_members_on_change(void (*fn)(const ephd_member_t *was, uint32_t nwas,
                                       const ephd_view_t *view)) {
  on_change = fn;
}

void ephd_members_close(void) {
  free(told);
  free(staying);
  free(kept);
  told = kept = NULL;
  staying = NULL;
  free(ignored);
  ignored = NULL;
  nignored = 0;
  free(rows);
  free(live);
  rows = NULL;
  live = NULL;
  nrows = view.count = 0;
}

/* --- the cell's status read --------------------------------------------- */

typedef struct {
  uint64_t held, owned;
} tally_t;

static void count_held(void *arg, const char *tenant, size_t tenant_len,
                       const char *queue, size_t queue_len,
                       const char *partition, size_t partition_len) {
  ((tally_t *)arg)->held++;
}

static void count_owned(void *arg, const char *tenant, size_t tenant_len,
                        const char *queue, size_t queue_len,
                        const char *partition, size_t partition_len) {
  tally_t *t = arg;
  t->held++;
  t->owned += ephd_placement_owner(&view, tenant, tenant_len, queue, queue_len,
                                   partition,
                                   partition_len) == &view.members[view.self];
}

void ephd_ffi_cell(ephd_cell_t *cell, int partitions) {
  memset(cell, 0, sizeof(*cell));
  cell->members = nrows;
  cell->live = view.count;
  cell->self = self_row;
  cell->database = database;
  cell->fresh = fresh();
  cell->ttl_ms = ttl_ms;
  cell->version = version;
  if (!partitions) return;
  /* A cell of one owns all it holds, and is never hashed. */
  tally_t t = {0, 0};
  ephd_engine_each_partition(engine, view.count > 1 ? count_owned : count_held,
                             &t);
  cell->partitions_held = t.held;
  cell->partitions_owned = view.count > 1 ? t.owned : t.held;
}

int ephd_ffi_cell_member(uint32_t i, ephd_cell_member_t *member) {
  if (i >= nrows) return EPHD_E_NOT_FOUND;
  const row_t *r = &rows[i];
  format_id(member->id, r->m.id);
  member->address.ptr = r->m.address;
  member->address.len = strlen(r->m.address);
  member->epoch = r->m.epoch;
  member->live = in_view(r);
  member->ttl_ms = r->ttl_ms;
  member->seen_ms_ago = database ? r->age_ms + (uv_now(loop) - read_ms) : 0;
  return EPHD_OK;
}

/* --- the leaving notice ------------------------------------------------ */

static const char LEAVING_TARGET[] = "/api/v1/ephemeral/leaving";

int ephd_ffi_cell_ready(char *out, size_t cap) {
  int up = !going && !leaving;
  snprintf(out, cap, "{\"id\":\"%s\",\"epoch\":%" PRIu32 ",\"ready\":%s}",
           self_id, self.epoch, up ? "true" : "false");
  return up ? 200 : 503;
}

/* {"id":"<16 hex>","epoch":<n>}, exactly as ephd_members_announce writes
 * it: only members send it. */
static int parse_notice(ephd_slice_t b, uint64_t *id, uint64_t *epoch) {
  static const char A[] = "{\"id\":\"", B[] = "\",\"epoch\":";
  size_t a = sizeof(A) - 1, bl = sizeof(B) - 1;
  if (b.len < a + 16 + bl + 2 || memcmp(b.ptr, A, a) != 0 ||
      parse_id(b.ptr + a, 16, id) != 0 || memcmp(b.ptr + a + 16, B, bl) != 0 ||
      b.ptr[b.len - 1] != '}')
    return -1;
  char num[12];
  size_t n = b.len - a - 16 - bl - 1;
  if (n == 0 || n >= sizeof(num)) return -1;
  memcpy(num, b.ptr + a + 16 + bl, n);
  num[n] = 0;
  return parse_u64(num, UINT32_MAX, epoch);
}

/* The notice's query: id=<16 hex>&epoch=<n>, as the body names them. The
 * mark signs the target, not the body's bytes (mark.h): a body alone could
 * be swapped under a mark seen on the wire for one as long naming another
 * member, which every receiver would then drop from its view for good. */
static int notice_query(char *out, size_t cap, const char *id, uint32_t epoch) {
  return snprintf(out, cap, "id=%s&epoch=%" PRIu32, id, epoch);
}

int ephd_ffi_cell_leaving(const ephd_request_t *req, char *out, size_t cap) {
  ephd_slice_t tenant;
  if (ephd_ffi_forward_tenant(req, &tenant) == EPHD_E_REFUSED)
    return EPHD_E_REFUSED;
  uint64_t id, epoch;
  if (parse_notice(req->body, &id, &epoch) != 0) return EPHD_E_BAD_REQUEST;
  char q[64], hex[17];
  snprintf(hex, sizeof(hex), "%016" PRIx64, id);
  size_t qn = (size_t)notice_query(q, sizeof(q), hex, (uint32_t)epoch);
  if (req->query.len != qn || memcmp(req->query.ptr, q, qn) != 0)
    return EPHD_E_BAD_REQUEST;
  row_t *r = find_row(id);
  /* Excluded at once, until its row goes: every request for its partitions
   * goes to their new owners, which take its hand-over when it comes. A
   * member this broker has not read yet is in no view of its own. */
  if (r && r->m.epoch == epoch && !r->leaving && id != self.id) {
    r->leaving = 1;
    uint32_t nwas = view.count;
    changed(rebuild(), nwas);
  }
  if (r && !going && !leaving) r->promised = 1;
  snprintf(out, cap, "{\"id\":\"%s\",\"leaving\":%s}", self_id,
           going || leaving ? "true" : "false");
  return EPHD_OK;
}

static void on_told_deadline(uv_timer_t *t);

static void drained(void) {
  phase = DONE;
  void (*done)(void) = on_told;
  on_told = NULL;
  done();
}

static void told_all(void) {
  if (phase != TELLING) return;
  uv_timer_stop(&told_timer);
  /* Sorted by id as the view is: the survivors keep placement's order. */
  kept = calloc(ntold + 1, sizeof(*kept));
  if (kept == NULL) abort();
  uint32_t n = 0;
  for (uint32_t i = 0; i < ntold; i++) {
    const row_t *r = find_row(told[i].id);
    if (told[i].id == self.id) after.self = n;
    /* Staying as it answered, and not leaving since. */
    if (told[i].id == self.id || (staying[i] && !(r && r->leaving)))
      kept[n++] = told[i];
  }
  after.members = kept;
  after.count = n;
  if (ntold < 2 || token == NULL) {
    drained();
    return;
  }
  /* A request a member relayed here just before it answered may still be
   * on its way: this broker listens a moment longer (twice the notices'
   * round trip), serves it, and hands it over with the rest, rather than
   * refusing its connection. */
  phase = DRAINING;
  uint64_t took = uv_now(loop) - told_ms;
  uv_timer_start(&told_timer, on_told_deadline, 2 * took + 10, 0);
}

typedef struct {
  uint32_t index;
} notice_t;

static void on_notice(void *data, int result, const ephd_peer_response_t *res) {
  notice_t *n = data;
  /* Staying: it answered, and is not stopping too. One that stops, or
   * cannot be reached, is no target for this broker's partitions. */
  static const char STAYING[] = "\"leaving\":false}";
  size_t sl = sizeof(STAYING) - 1;
  if (phase == TELLING && result == EPHD_PEER_OK && res->status == 200 &&
      res->body.len >= sl &&
      memcmp(res->body.ptr + res->body.len - sl, STAYING, sl) == 0) {
    staying[n->index] = 1;
  }
  free(n);
  if (--told_out == 0) told_all();
}

static void on_told_deadline(uv_timer_t *t) {
  (void)t;
  if (phase == READING)
    read_done();
  else if (phase == AWAITING)
    tell();
  else if (phase == TELLING)
    told_all();
  else if (phase == DRAINING)
    drained();
}

/* Whether a row is told this broker leaves: every member live by its row
 * and not leaving, ready or not yet. One that joined a moment ago is not
 * in the view until it answers a probe, while its own view already holds
 * this broker (it probed it at its boot): untold, it would relay this
 * broker's partitions here until the row goes, and hear its connections
 * refused (ephemeral_forward_failed) for the whole hand-over. */
static int told_of(const row_t *r) {
  return in_view(r) || (r->live && !r->leaving);
}

/* Sends the notice to every member live by its row (told_of); told_all
 * once each answered or timeout_ms passed. */
static void tell(void) {
  phase = TELLING;
  told_ms = uv_now(loop);
  ntold = 0;
  for (uint32_t i = 0; i < nrows; i++) ntold += told_of(&rows[i]) != 0;
  if (ntold == 0) ntold = 1; /* no read yet: this broker alone */
  told = calloc(ntold, sizeof(*told));
  staying = calloc(ntold, 1);
  if (told == NULL || staying == NULL) abort();
  if (nrows == 0) {
    told[0] = self;
  } else {
    /* In the rows' order, by id, as the view's. */
    for (uint32_t i = 0, n = 0; i < nrows; i++)
      if (told_of(&rows[i])) told[n++] = rows[i].m;
  }
  if (token == NULL || ntold < 2) {
    told_all();
    return;
  }
  char body[64];
  int len =
      snprintf(body, sizeof(body), "{\"id\":\"%s\",\"epoch\":%" PRIu32 "}",
               self_id, self.epoch);
  char target[sizeof(LEAVING_TARGET) + 64];
  size_t tlen = sizeof(LEAVING_TARGET) - 1;
  memcpy(target, LEAVING_TARGET, tlen);
  target[tlen++] = '?';
  tlen += (size_t)notice_query(target + tlen, sizeof(target) - tlen, self_id,
                               self.epoch);
  /* The forward mark, as the hand-over's: the tenant is nobody's. */
  static const char nobody[] = "00000000-0000-0000-0000-000000000000";
  ephd_buf_t headers;
  ephd_buf_init(&headers);
  char *mark = ephd_buf_reserve(&headers, ephd_mark_size(sizeof(nobody) - 1));
  headers.len = (size_t)(ephd_mark_write(mark, nobody, sizeof(nobody) - 1) -
                         headers.base);
  ephd_buf_appends(&headers, "Content-Type: application/json\r\n");
  told_out = 1; /* held while sending, so no answer ends it early */
  for (uint32_t i = 0; i < ntold; i++) {
    if (told[i].id == self.id) continue;
    ephd_peer_t *peer = ephd_peer(told[i].address);
    notice_t *n = malloc(sizeof(*n));
    if (n == NULL) abort();
    n->index = i;
    ephd_peer_request_t rq = {
        .method = {"POST", 4},
        .target = {target, tlen},
        .headers = {headers.base, headers.len},
        .body = {body, (size_t)len},
        .timeout_ms = tell_ms,
    };
    ephd_peer_call_t *sent;
    if (peer == NULL || ephd_peer_send(peer, &rq, on_notice, n, &sent) != 0) {
      free(n);
      continue;
    }
    told_out++;
  }
  ephd_buf_free(&headers);
  uv_timer_start(&told_timer, on_told_deadline, tell_ms, 0);
  if (--told_out == 0) told_all();
}

/* A member this broker told it stays, which said it leaves: its hand-over
 * may be on its way here, until its row goes. */
static int promised_pending(void) {
  for (uint32_t i = 0; i < nrows; i++)
    if (rows[i].promised && rows[i].leaving) return 1;
  return 0;
}

/* The read the stop tells from is in (or failed, or took too long). A
 * member that stopped a moment before this broker was told it stays, and
 * hands its partitions here: this broker listens on until that member's
 * row is gone (its hand-over over), then hands them on with its own. */
static void read_done(void) {
  uv_timer_stop(&told_timer);
  if (database && token && promised_pending()) {
    phase = AWAITING;
    uv_timer_start(&told_timer, on_told_deadline, await_ms, 0);
    return;
  }
  tell();
}

/* A beat's answer, or its failure, while the stop reads the rows: one
 * that began before the stop may not hold a row written since. */
static void read_answered(void) {
  if (phase != READING) return;
  if (read_going)
    read_done();
  else
    beat();
}

void ephd_members_announce(uint64_t wait_ms, uint64_t timeout_ms,
                           void (*done)(void)) {
  going = 1;
  on_told = done;
  tell_ms = timeout_ms;
  await_ms = wait_ms;
  uv_timer_init(loop, &told_timer);
  /* The rows are read once more, from now on (probes already answer that
   * this broker stops): a member whose row was written since the last
   * read has probed this broker ready and routes to it, and is told only
   * if it is read (told_of). */
  if (database && token) {
    phase = READING;
    uv_timer_start(&told_timer, on_told_deadline, timeout_ms, 0);
    if (!beating) beat();
    if (!beating) read_done(); /* the database is away: tell from the view */
    return;
  }
  read_done();
}

const ephd_view_t *ephd_members_staying(void) {
  return phase == DONE && kept ? &after : &view;
}
