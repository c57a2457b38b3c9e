#include "members.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"
#include "log.h"
#include "pg.h"

/* A row of the last read: a member, live or not. */
typedef struct {
  ephd_member_t m;
  int live;
  uint64_t ttl_ms; /* the member's own */
  uint64_t age_ms; /* since its last beat, by the database's clock */
} row_t;

static uv_loop_t *loop;
static ephd_engine_t *engine;
static int database;
static uint64_t ttl_ms;
static ephd_member_t self;
static char self_id[17], self_epoch[12], self_ttl[24];

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
static int leaving;
static void (*on_left)(void);
static void (*on_change)(const ephd_member_t *was, uint32_t nwas,
                         const ephd_view_t *view);

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
 * ones are left out by hand. */
static const char BEAT_SQL[] =
    "WITH beat AS ("
    " INSERT INTO queen.ephemeral_members"
    " (id, address, epoch, ttl_ms, last_seen)"
    " VALUES ($1, $2, $3::bigint, $4::int, now())"
    " ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address,"
    " epoch = EXCLUDED.epoch, ttl_ms = EXCLUDED.ttl_ms, last_seen = now()"
    " RETURNING id, address, epoch, ttl_ms), "
    "gone AS ("
    " DELETE FROM queen.ephemeral_members WHERE id IN ("
    "  SELECT id FROM queen.ephemeral_members WHERE id <> $1 AND"
    "  (last_seen < now() - greatest(60000, 10 * ttl_ms::bigint)"
    "   * interval '1 millisecond' OR (address = $2 AND $5::bool))"
    "  FOR UPDATE SKIP LOCKED)"
    " RETURNING id) "
    "SELECT id, address, epoch, ttl_ms, 0::bigint FROM beat "
    "UNION ALL "
    "SELECT id, address, epoch, ttl_ms,"
    " greatest(0, floor(extract(epoch FROM now() - last_seen) * 1000))::bigint"
    " FROM queen.ephemeral_members"
    " WHERE id <> $1 AND id NOT IN (SELECT id FROM gone)";

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

static int by_id(const void *a, const void *b) {
  uint64_t x = ((const row_t *)a)->m.id, y = ((const row_t *)b)->m.id;
  return x < y ? -1 : x > y;
}

/* Replaces the last read with rows (sorted here, and owned from now on),
 * and the view with their live members; returns the view's old members
 * for the caller to compare and free. */
static ephd_member_t *install(row_t *next, uint32_t n) {
  qsort(next, n, sizeof(*next), by_id);
  ephd_member_t *was = live;
  live = calloc(n, sizeof(*live));
  if (live == NULL) abort();
  uint32_t count = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (next[i].m.id == self.id) {
      self_row = i;
      view.self = count;
    }
    if (next[i].live) live[count++] = next[i].m;
  }
  free(rows);
  rows = next;
  nrows = n;
  view.members = live;
  view.count = count;
  return was;
}

static const row_t *row_of(const row_t *list, uint32_t n, uint64_t id) {
  for (uint32_t i = 0; i < n; i++)
    if (list[i].m.id == id) return &list[i];
  return NULL;
}

/* One line per member that joined or left this broker's view, by walking
 * both views in id order. A member leaves because its row is gone (it
 * stopped cleanly, or was collected) or because it went unseen. Returns
 * how many joined or left. */
static uint32_t log_changes(const ephd_member_t *was, uint32_t nwas) {
  char id[17], epoch[12], count[12];
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
               "reason", row_of(rows, nrows, a) ? "unseen" : "gone", "live",
               count, NULL);
      i++;
      changes++;
    } else {
      format_id(id, b);
      snprintf(epoch, sizeof(epoch), "%08" PRIx32, view.members[j].epoch);
      ephd_log("info", "member_joined", "id", id, "address",
               view.members[j].address, "epoch", epoch, "live", count, NULL);
      j++;
      changes++;
    }
  }
  return changes;
}

static void apply(PGresult *res) {
  int n = PQntuples(res);
  row_t *next = calloc((size_t)n + 1, sizeof(*next));
  if (next == NULL) abort();
  uint32_t count = 0;
  for (int i = 0; i < n; i++) {
    row_t *r = &next[count];
    uint64_t epoch;
    const char *address = PQgetvalue(res, i, 1);
    size_t len = (size_t)PQgetlength(res, i, 1);
    /* A row this broker cannot read is no member it could relay to. */
    if (parse_id(PQgetvalue(res, i, 0), PQgetlength(res, i, 0), &r->m.id) ||
        len >= sizeof(r->m.address) ||
        parse_u64(PQgetvalue(res, i, 2), UINT32_MAX, &epoch) ||
        parse_u64(PQgetvalue(res, i, 3), UINT32_MAX, &r->ttl_ms) ||
        parse_u64(PQgetvalue(res, i, 4), UINT64_MAX, &r->age_ms))
      continue;
    memcpy(r->m.address, address, len);
    r->m.epoch = (uint32_t)epoch;
    r->live = r->age_ms <= r->ttl_ms;
    count++;
  }
  if (row_of(next, count, self.id) == NULL) {
    next[count].m = self; /* the beat's own row cannot be missing */
    next[count].ttl_ms = ttl_ms;
    next[count++].live = 1;
  }
  uint32_t nwas = view.count;
  ephd_member_t *was = install(next, count);
  if (log_changes(was, nwas) && on_change) on_change(was, nwas, &view);
  free(was);
}

static void on_beat(void *data, PGresult *res, const char *err) {
  (void)data;
  beating = 0;
  if (leaving) return;
  if (res == NULL) {
    /* Once per run of failures: the store logs the outage itself. */
    if (!failing)
      ephd_log("warn", "cell_heartbeat_failed", "reason", err, "msg",
               "keeping the last view of the cell", NULL);
    failing = 1;
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
}

static void beat(void) {
  if (beating || leaving || !ephd_pg_connected()) return;
  const char *values[5] = {self_id, self.address, self_epoch, self_ttl,
                           taken_over ? "f" : "t"};
  int lengths[5];
  for (int i = 0; i < 5; i++) lengths[i] = (int)strlen(values[i]);
  if (ephd_pg_query(BEAT_SQL, 5, values, lengths, on_beat, NULL) != 0) return;
  beating = 1;
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
                        const char *advertise, int db, uint64_t ttl) {
  loop = l;
  engine = e;
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
  while (beating && !boot_over) uv_run(loop, UV_RUN_ONCE);
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

void ephd_ffi_cell(ephd_cell_t *cell) {
  memset(cell, 0, sizeof(*cell));
  cell->members = nrows;
  cell->live = view.count;
  cell->self = self_row;
  cell->database = database;
  cell->fresh = fresh();
  cell->ttl_ms = ttl_ms;
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
  member->live = r->live;
  member->ttl_ms = r->ttl_ms;
  member->seen_ms_ago = database ? r->age_ms + (uv_now(loop) - read_ms) : 0;
  return EPHD_OK;
}
