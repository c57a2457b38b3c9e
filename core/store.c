#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "fanout.h"
#include "ffi.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pg.h"

static uv_loop_t *loop;
static ephd_engine_t *engine;
static const char *db_url;
static ephd_store_apply_cb apply_declarations, apply_grants;
static uv_timer_t refresh_timer;
static int loading;
static int boot_settled, boot_loaded;
static int down_logged;
static uint64_t generation;
static PGresult *rows; /* valid only while apply runs */
/* The counts of the last loads: a refresh that finds what the last one
 * found logs at debug, so a quiet broker's log is not a refresh every
 * 30 s; the first load and every change log at info. */
static int declarations_count = -1, grants_count = -1;

/* One advisory lock keeps two brokers of a cell from racing the DDL. The
 * members table is core/cell/members.c's, created here with the others so it
 * exists before the first heartbeat, which is queued after this. */
static const char SCHEMA_SQL[] =
    "DO $$ BEGIN "
    "PERFORM pg_advisory_xact_lock(7060631502); "
    "CREATE SCHEMA IF NOT EXISTS queen; "
    "CREATE TABLE IF NOT EXISTS queen.ephemeral_queues ("
    " tenant_id uuid NOT NULL, queue text NOT NULL, options jsonb NOT NULL,"
    " updated_at timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (tenant_id, queue)); "
    "CREATE TABLE IF NOT EXISTS queen.ephemeral_quota ("
    " tenant_id uuid PRIMARY KEY, enabled bool NOT NULL DEFAULT true,"
    " max_bytes bigint, max_queues int, max_msgs_per_sec int,"
    " updated_at timestamptz NOT NULL DEFAULT now()); "
    "CREATE TABLE IF NOT EXISTS queen.ephemeral_members ("
    " id text PRIMARY KEY, address text NOT NULL, epoch bigint NOT NULL,"
    " ttl_ms int NOT NULL, last_seen timestamptz NOT NULL DEFAULT now(),"
    " mac text); "
    /* The rows' MAC (core/cell/members.c), on a table an earlier version made:
     * its brokers still write rows, unsigned, which this one ignores. */
    "ALTER TABLE queen.ephemeral_members ADD COLUMN IF NOT EXISTS mac text; "
    "END $$";

static const char LOAD_SQL[] =
    "SELECT tenant_id::text, queue, options::text "
    "FROM queen.ephemeral_queues";

static const char GRANTS_SQL[] =
    "SELECT tenant_id::text, enabled, coalesce(max_bytes, -1), "
    "coalesce(max_queues, -1), coalesce(max_msgs_per_sec, -1) "
    "FROM queen.ephemeral_quota";

/* The options are taken from the request body by PostgreSQL itself, so the
 * stored declaration is exactly what was sent, as jsonb keeps it. */
static const char UPSERT_SQL[] =
    "INSERT INTO queen.ephemeral_queues (tenant_id, queue, options) "
    "VALUES ($1::uuid, $2, COALESCE(($3::jsonb)->'options', '{}'::jsonb)) "
    "ON CONFLICT (tenant_id, queue) DO UPDATE "
    "SET options = EXCLUDED.options, updated_at = now() "
    "RETURNING options::text";

static const char DELETE_SQL[] =
    "DELETE FROM queen.ephemeral_queues "
    "WHERE tenant_id = $1::uuid AND queue = $2 RETURNING 1";

/* A grant is set whole: a limit not given is NULL (the broker's default),
 * sent as '' since the query's parameters are text. PostgreSQL answers
 * with the row as JSON, nulls included. */
static const char GRANT_SET_SQL[] =
    "INSERT INTO queen.ephemeral_quota (tenant_id, enabled, max_bytes, "
    "max_queues, max_msgs_per_sec) VALUES ($1::uuid, $2::bool, "
    "NULLIF($3, '')::bigint, NULLIF($4, '')::int, NULLIF($5, '')::int) "
    "ON CONFLICT (tenant_id) DO UPDATE SET enabled = EXCLUDED.enabled, "
    "max_bytes = EXCLUDED.max_bytes, max_queues = EXCLUDED.max_queues, "
    "max_msgs_per_sec = EXCLUDED.max_msgs_per_sec, updated_at = now() "
    "RETURNING json_build_object('tenant', tenant_id, 'enabled', enabled, "
    "'maxBytes', max_bytes, 'maxQueues', max_queues, 'maxMsgsPerSec', "
    "max_msgs_per_sec)::text";

static const char GRANT_DELETE_SQL[] =
    "DELETE FROM queen.ephemeral_quota WHERE tenant_id = $1::uuid RETURNING 1";

/* --- loading ---------------------------------------------------------- */

uint32_t ephd_ffi_store_rows(void) {
  return rows ? (uint32_t)PQntuples(rows) : 0;
}

int ephd_ffi_store_row(uint32_t i, ephd_decl_row_t *row) {
  if (rows == NULL || (int)i >= PQntuples(rows) || PQnfields(rows) != 3)
    return EPHD_E_NOT_FOUND;
  ephd_slice_t *out[3] = {&row->tenant, &row->queue, &row->options};
  for (int c = 0; c < 3; c++) {
    out[c]->ptr = PQgetvalue(rows, (int)i, c);
    out[c]->len = (size_t)PQgetlength(rows, (int)i, c);
  }
  return EPHD_OK;
}

static int64_t column_i64(int i, int c) {
  return strtoll(PQgetvalue(rows, i, c), NULL, 10);
}

int ephd_ffi_store_grant(uint32_t i, ephd_grant_row_t *row) {
  if (rows == NULL || (int)i >= PQntuples(rows) || PQnfields(rows) != 5)
    return EPHD_E_NOT_FOUND;
  row->tenant.ptr = PQgetvalue(rows, (int)i, 0);
  row->tenant.len = (size_t)PQgetlength(rows, (int)i, 0);
  row->enabled = PQgetvalue(rows, (int)i, 1)[0] == 't';
  row->max_bytes = column_i64((int)i, 2);
  row->max_queues = column_i64((int)i, 3);
  row->max_msgs_per_sec = column_i64((int)i, 4);
  return EPHD_OK;
}

void ephd_ffi_declare(const char *tenant, size_t tenant_len, const char *queue,
                      size_t queue_len, const ephd_options_t *opts) {
  ephd_engine_declare(engine, tenant, tenant_len, queue, queue_len, opts,
                      generation);
}

static void settle_boot(int loaded) {
  if (boot_settled) return;
  boot_settled = 1;
  boot_loaded = loaded;
}

static void log_loaded(const char *event, int count, int *last) {
  char n[24];
  snprintf(n, sizeof(n), "%d", count);
  ephd_log(count == *last ? "debug" : "info", event, "count", n, NULL);
  *last = count;
}

static void on_loaded(void *data, PGresult *res, const char *err) {
  (void)data;
  if (res == NULL) {
    loading = 0;
    ephd_log("error", "declarations_load_failed", "reason", err, NULL);
    return;
  }
  generation++;
  rows = res;
  apply_declarations();
  rows = NULL;
  ephd_engine_sweep_declarations(engine, generation);
  log_loaded("declarations_loaded", PQntuples(res), &declarations_count);
}

/* Applies a load of every grant (GRANTS_SQL's result). */
static void apply_grant_rows(PGresult *res) {
  rows = res;
  apply_grants();
  rows = NULL;
  log_loaded("grants_loaded", PQntuples(res), &grants_count);
}

static void on_grants(void *data, PGresult *res, const char *err) {
  (void)data;
  loading = 0;
  if (res == NULL) {
    ephd_log("error", "grants_load_failed", "reason", err, NULL);
    return;
  }
  apply_grant_rows(res);
  settle_boot(1);
}

/* Both queries go out together; the connection runs them in order. */
static void load(void) {
  if (loading) return;
  if (ephd_pg_query(LOAD_SQL, 0, NULL, NULL, on_loaded, NULL) == 0 &&
      ephd_pg_query(GRANTS_SQL, 0, NULL, NULL, on_grants, NULL) == 0)
    loading = 1;
}

static void on_schema(void *data, PGresult *res, const char *err) {
  (void)data;
  if (res == NULL) {
    ephd_log("error", "schema_failed", "reason", err, NULL);
    return;
  }
  load();
}

static void on_connected(void) {
  if (down_logged) ephd_log("info", "database_restored", NULL);
  down_logged = 0;
  ephd_pg_query(SCHEMA_SQL, 0, NULL, NULL, on_schema, NULL);
}

/* Logged once per outage, not once per retry. */
static void on_lost(const char *why) {
  loading = 0;
  if (!down_logged) {
    ephd_log("warn", "database_unavailable", "reason", why, "msg",
             "push, pop and ack go on; declarations wait for it", NULL);
    down_logged = 1;
  }
  settle_boot(0);
}

static void on_refresh(uv_timer_t *t) {
  (void)t;
  if (ephd_pg_connected()) load();
}

void ephd_store_start(uv_loop_t *l, ephd_engine_t *e, const char *url,
                      uint64_t refresh_ms, ephd_store_apply_cb declarations,
                      ephd_store_apply_cb grants) {
  loop = l;
  engine = e;
  db_url = url;
  apply_declarations = declarations;
  apply_grants = grants;
  if (url == NULL) {
    settle_boot(0);
    return;
  }
  uv_timer_init(loop, &refresh_timer);
  uv_timer_start(&refresh_timer, on_refresh, refresh_ms, refresh_ms);
  uv_unref((uv_handle_t *)&refresh_timer);
  ephd_pg_start(loop, url, on_connected, on_lost);
}

static void on_boot_deadline(uv_timer_t *t) {
  (void)t;
  settle_boot(0);
}

int ephd_store_boot(uint64_t timeout_ms) {
  uv_timer_t deadline;
  uv_timer_init(loop, &deadline);
  uv_timer_start(&deadline, on_boot_deadline, timeout_ms, 0);
  while (!boot_settled) uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_run(loop, UV_RUN_NOWAIT); /* let the close complete */
  if (db_url && !boot_loaded)
    ephd_log("warn", "boot_without_declarations", "msg",
             "serving implicit queues and retrying the database", NULL);
  return boot_loaded;
}

int ephd_ffi_database_state(void) {
  if (db_url == NULL) return EPHD_DATABASE_NONE;
  return ephd_pg_connected() ? EPHD_DATABASE_CONNECTED
                             : EPHD_DATABASE_UNAVAILABLE;
}

void ephd_store_stop(void) {
  if (db_url == NULL) return;
  uv_close((uv_handle_t *)&refresh_timer, NULL);
  ephd_pg_stop();
  db_url = NULL;
}

/* --- writes ------------------------------------------------------------ */

typedef struct {
  ephd_deferred_t *held; /* the request's hold; NULL once its client left */
  char *tenant;
  size_t tenant_len;
  char *queue;
  size_t queue_len;
  ephd_options_t opts;
  int reserved; /* a configure of a new queue: ephd_engine_reserve_queue */
  /* A delete in a cell: sent to the other members once the row is gone,
   * and what this broker removed, answered once they have answered. */
  ephd_fanout_t *fanout;
  int deleted, declared;
} write_t;

static write_t *write_new(const ephd_request_t *req, const char *tenant,
                          size_t tenant_len, const char *queue,
                          size_t queue_len) {
  write_t *w = calloc(1, sizeof(*w));
  if (w == NULL) abort();
  w->tenant = malloc(tenant_len + 1);
  w->queue = malloc(queue_len + 1);
  if (w->tenant == NULL || w->queue == NULL) abort();
  memcpy(w->tenant, tenant, tenant_len);
  memcpy(w->queue, queue, queue_len);
  w->tenant[tenant_len] = w->queue[queue_len] = 0; /* for the log */
  w->tenant_len = tenant_len;
  w->queue_len = queue_len;
  return w;
}

/* data is the write's hold: cleared, so its answer goes nowhere. */
static void on_client_left(void *data) {
  ephd_deferred_t **held = data;
  *held = NULL;
}

/* A write holds its request until the database answers; at the broker's
 * stop the request is cut off and the store fails the query. */
static const ephd_deferred_ops_t HELD = {.cancel = on_client_left};

/* Holds the request being dispatched before its query is queued: a
 * connection lost while sending it answers through the callback at once. */
static void hold(ephd_deferred_t **held, const ephd_request_t *req) {
  *held = ephd_http_defer(req, &HELD, held);
}

/* Where the held request's answer goes, or NULL if its client has gone:
 * the one way a write's outcome reaches its answer. */
static ephd_conn_t *release(ephd_deferred_t **held) {
  ephd_deferred_t *d = *held;
  *held = NULL;
  return d ? ephd_deferred_conn(d) : NULL;
}

static void write_free(write_t *w) {
  if (w->fanout) ephd_fanout_free(w->fanout);
  free(w->tenant);
  free(w->queue);
  free(w);
}

/* A database error's text is for the operator: it names the schema and
 * quotes values, so it is logged, and the client is answered with the
 * taxonomy's code and a fixed message. */
static void answer_failed(ephd_conn_t *c, const write_t *w, ephd_code_t code,
                          const char *message, const char *err) {
  ephd_log("error", ephd_code_name(code), "tenant", w->tenant, "queue",
           w->queue, "reason", err ? err : "unknown error", NULL);
  if (c) ephd_http_refuse(c, code, message);
}

static void on_configured(void *data, PGresult *res, const char *err) {
  write_t *w = data;
  if (w->reserved)
    ephd_engine_release_queue(engine, w->tenant, w->tenant_len, w->queue_len);
  if (res)
    ephd_engine_declare(engine, w->tenant, w->tenant_len, w->queue,
                        w->queue_len, &w->opts, generation);
  ephd_conn_t *c = release(&w->held);
  if (c && res) {
    ephd_buf_t *out = ephd_http_begin(c, 201, NULL);
    ephd_buf_appends(out, "{\"queue\":");
    ephd_json_write_string(out, w->queue, w->queue_len);
    ephd_buf_appends(out, ",\"options\":");
    ephd_buf_append(out, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    ephd_buf_append(out, "}", 1);
    ephd_http_end(c);
  } else {
    answer_failed(c, w, EPHD_CODE_EPHEMERAL_CONFIGURE_FAILED,
                  "the declaration could not be written", err);
  }
  write_free(w);
}

int ephd_ffi_configure(const ephd_request_t *req, const char *tenant,
                       size_t tenant_len, const char *queue, size_t queue_len,
                       const ephd_tenant_limits_t *limits) {
  uint32_t *refusals = &req->op->refusals;
  *refusals = 0;
  ephd_tenant_t *t = ephd_engine_tenant(engine, tenant, tenant_len);
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, queue, queue_len);
  if (q == NULL) {
    *refusals =
        ephd_engine_plan_queue(engine, t, tenant_len, queue_len, limits);
    if (*refusals) return EPHD_E_REFUSED;
  }
  if (!ephd_pg_connected()) return EPHD_E_UNAVAILABLE;
  write_t *w = write_new(req, tenant, tenant_len, queue, queue_len);
  w->opts = req->op->options;
  /* The queue is created when its write completes, and checked now: what
   * it will create is reserved from this check on, so configures in flight
   * together cannot each pass an allowance that has room for one, and no
   * row is written past it. */
  if (q == NULL) {
    ephd_engine_reserve_queue(engine, tenant, tenant_len, queue_len);
    w->reserved = 1;
  }
  const char *values[3] = {w->tenant, w->queue, req->body.ptr};
  int lengths[3] = {(int)tenant_len, (int)queue_len, (int)req->body.len};
  hold(&w->held, req);
  ephd_pg_query(UPSERT_SQL, 3, values, lengths, on_configured, w);
  return EPHD_HELD;
}

static void answer_delete(ephd_conn_t *c, const char *queue, size_t len,
                          int deleted, int declared) {
  ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
  ephd_buf_appends(out, "{\"queue\":");
  ephd_json_write_string(out, queue, len);
  ephd_buf_appends(out, deleted ? ",\"deleted\":true" : ",\"deleted\":false");
  ephd_buf_appends(out,
                   declared ? ",\"declared\":true}" : ",\"declared\":false}");
  ephd_http_end(c);
}

/* Removes the queue from memory; returns whether there was one. */
static int forget(const char *tenant, size_t tenant_len, const char *queue,
                  size_t queue_len) {
  ephd_queue_t *q =
      ephd_engine_queue(engine, tenant, tenant_len, queue, queue_len);
  if (q == NULL) return 0;
  ephd_engine_delete(engine, q);
  return 1;
}

static void on_fanned(void *data) {
  write_t *w = data;
  ephd_conn_t *c = release(&w->held);
  if (c) answer_delete(c, w->queue, w->queue_len, w->deleted, w->declared);
  write_free(w);
}

/* The row is gone, then this broker's copy, then the members' (each
 * forgets its own at once, rather than keep it until its refresh finds
 * the declaration gone); the answer says what this broker removed. */
static void on_deleted(void *data, PGresult *res, const char *err) {
  write_t *w = data;
  if (res == NULL) {
    answer_failed(release(&w->held), w, EPHD_CODE_EPHEMERAL_DELETE_FAILED,
                  "the declaration could not be removed", err);
    write_free(w);
    return;
  }
  w->declared = PQntuples(res) > 0;
  w->deleted =
      forget(w->tenant, w->tenant_len, w->queue, w->queue_len) || w->declared;
  ephd_fanout_t *f = w->fanout;
  w->fanout = NULL;
  if (f && ephd_fanout_send(f, on_fanned, w) == 0) return;
  on_fanned(w);
}

int ephd_ffi_delete(const ephd_request_t *req, const char *tenant,
                    size_t tenant_len, const char *queue, size_t queue_len) {
  /* Without a database there is no declaration anywhere to remove; a
   * delete fanned out by a member of the cell removed it already. */
  if (db_url == NULL || req->forward.len > 0) {
    int existed = forget(tenant, tenant_len, queue, queue_len);
    answer_delete(ephd_http_conn(req), queue, queue_len, existed, 0);
    return EPHD_OK;
  }
  if (!ephd_pg_connected()) return EPHD_E_UNAVAILABLE;
  write_t *w = write_new(req, tenant, tenant_len, queue, queue_len);
  const char *values[2] = {w->tenant, w->queue};
  int lengths[2] = {(int)tenant_len, (int)queue_len};
  w->fanout = ephd_fanout_new(req, EPHD_FANOUT_DELETE, tenant, tenant_len);
  hold(&w->held, req);
  ephd_pg_query(DELETE_SQL, 2, values, lengths, on_deleted, w);
  return EPHD_HELD;
}

/* --- grants ------------------------------------------------------------ */

/* A grant write: the row, then a load of every grant, queued together on
 * the one connection, so the load sees the row and nothing can come
 * between them. The request is answered when the load is applied. */
typedef struct {
  ephd_deferred_t *held;
  char tenant[64];
  int set;             /* a set, else a delete */
  ephd_code_t failure; /* the code a failed write answers with */
  char *written;       /* set: the row as JSON; delete: "true" or "false" */
  char *err;           /* why the write failed, if it did */
} grant_write_t;

static void grant_write_free(grant_write_t *g) {
  free(g->written);
  free(g->err);
  free(g);
}

static char *copy(const char *s) {
  char *c = strdup(s ? s : "unknown error");
  if (c == NULL) abort();
  return c;
}

static void on_grant_written(void *data, PGresult *res, const char *err) {
  grant_write_t *g = data;
  if (res == NULL)
    g->err = copy(err);
  else if (g->set)
    g->written = copy(PQgetvalue(res, 0, 0));
  else
    g->written = copy(PQntuples(res) > 0 ? "true" : "false");
}

static void on_grants_reloaded(void *data, PGresult *res, const char *err) {
  grant_write_t *g = data;
  if (res) apply_grant_rows(res);
  ephd_conn_t *c = release(&g->held);
  if (g->written == NULL) {
    ephd_log("error", ephd_code_name(g->failure), "tenant", g->tenant, "reason",
             g->err, NULL);
    if (c) ephd_http_refuse(c, g->failure, "the grant could not be written");
  } else if (res == NULL) {
    /* Written, and applied at the next load: the refresh, a reconnect. */
    ephd_log("error", "grants_load_failed", "reason", err, NULL);
    if (c)
      ephd_http_refuse(c, EPHD_CODE_EPHEMERAL_UNAVAILABLE,
                       "the grant was written; it applies at the next "
                       "refresh, the database went away before");
  } else if (c) {
    char count[24];
    snprintf(count, sizeof(count), "%d", PQntuples(res));
    ephd_buf_t *out = ephd_http_begin(c, 200, NULL);
    if (g->set) {
      ephd_buf_appends(out, "{\"grant\":");
      ephd_buf_appends(out, g->written);
    } else {
      ephd_buf_appends(out, "{\"tenant\":");
      ephd_json_write_string(out, g->tenant, strlen(g->tenant));
      ephd_buf_appends(out, ",\"deleted\":");
      ephd_buf_appends(out, g->written);
    }
    ephd_buf_appends(out, ",\"grants\":");
    ephd_buf_appends(out, count);
    ephd_buf_append(out, "}", 1);
    ephd_http_end(c);
  }
  grant_write_free(g);
}

static int grant_write(const ephd_request_t *req, const char *tenant,
                       size_t tenant_len, int set, const char *sql, int nparams,
                       const char *const *values, const int *lengths) {
  if (!ephd_pg_connected()) return EPHD_E_UNAVAILABLE;
  grant_write_t *g = calloc(1, sizeof(*g));
  if (g == NULL) abort();
  if (tenant_len >= sizeof(g->tenant)) tenant_len = sizeof(g->tenant) - 1;
  memcpy(g->tenant, tenant, tenant_len);
  g->set = set;
  g->failure = set ? EPHD_CODE_EPHEMERAL_CONFIGURE_FAILED
                   : EPHD_CODE_EPHEMERAL_DELETE_FAILED;
  hold(&g->held, req);
  ephd_pg_query(sql, nparams, values, lengths, on_grant_written, g);
  ephd_pg_query(GRANTS_SQL, 0, NULL, NULL, on_grants_reloaded, g);
  return EPHD_HELD;
}

/* A limit as a text parameter: '' for NULL (-1). */
static int limit_text(char *out, size_t size, int64_t v) {
  return v < 0 ? 0 : snprintf(out, size, "%lld", (long long)v);
}

int ephd_ffi_grant_set(const ephd_request_t *req, const ephd_grant_row_t *row) {
  char limits[3][24];
  int64_t v[3] = {row->max_bytes, row->max_queues, row->max_msgs_per_sec};
  const char *values[5] = {row->tenant.ptr, row->enabled ? "true" : "false",
                           limits[0], limits[1], limits[2]};
  int lengths[5] = {(int)row->tenant.len, (int)strlen(values[1])};
  for (int i = 0; i < 3; i++)
    lengths[2 + i] = limit_text(limits[i], sizeof(limits[i]), v[i]);
  return grant_write(req, row->tenant.ptr, row->tenant.len, 1, GRANT_SET_SQL, 5,
                     values, lengths);
}

int ephd_ffi_grant_delete(const ephd_request_t *req, const char *tenant,
                          size_t tenant_len) {
  const char *values[1] = {tenant};
  int lengths[1] = {(int)tenant_len};
  return grant_write(req, tenant, tenant_len, 0, GRANT_DELETE_SQL, 1, values,
                     lengths);
}
