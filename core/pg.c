#include "pg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define CONNECT_TIMEOUT_MS 5000

typedef struct job {
  ephd_node_t link; /* in jobs */
  char *sql;
  int nparams;
  char **values;
  int *lengths;
  ephd_pg_cb cb;
  void *data;
} job_t;

/* One attempt's connection and its poll handle: freed together once the
 * handle is closed, which libuv requires before libpq closes the socket. */
typedef struct {
  PGconn *conn;
  uv_poll_t poll;
  int fd;
  int polling;
} link_t;

static uv_loop_t *loop;
static char *url;
static ephd_pg_connected_cb on_connected;
static ephd_pg_lost_cb on_lost;
static link_t *link;
static int connected;
static int stopped;
static uv_timer_t retry_timer, connect_timer;
static uint64_t backoff_ms = BACKOFF_MIN_MS;
static ephd_list_t jobs; /* in the order they were asked */
static int in_flight;    /* the first job has been sent */
static PGresult *last_result;
static char last_error[256];

static void on_poll(uv_poll_t *p, int status, int events);
static void attempt(void);
static void pump(void);

static void job_free(job_t *j) {
  for (int i = 0; i < j->nparams; i++) free(j->values[i]);
  free(j->values);
  free(j->lengths);
  free(j->sql);
  free(j);
}

static job_t *take_first(void) {
  job_t *j = EPHD_ENTRY(jobs.head, job_t, link);
  ephd_list_remove(&jobs, &j->link);
  return j;
}

static void fail_all(const char *why) {
  while (jobs.head) {
    job_t *j = take_first();
    j->cb(j->data, NULL, why);
    job_free(j);
  }
  in_flight = 0;
}

static void on_link_closed(uv_handle_t *h) {
  link_t *l = h->data;
  PQfinish(l->conn);
  free(l);
}

static void drop_link(void) {
  if (link == NULL) return;
  link_t *l = link;
  link = NULL;
  if (l->polling) {
    uv_poll_stop(&l->poll);
    uv_close((uv_handle_t *)&l->poll, on_link_closed);
  } else {
    PQfinish(l->conn);
    free(l);
  }
}

static void schedule_retry(void) {
  if (stopped) return;
  uv_timer_start(&retry_timer, (uv_timer_cb)attempt, backoff_ms, 0);
  backoff_ms =
      backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
}

static void lost(const char *why) {
  connected = 0;
  uv_timer_stop(&connect_timer);
  if (last_result) {
    PQclear(last_result);
    last_result = NULL;
  }
  char reason[256];
  snprintf(reason, sizeof(reason), "%s", why && *why ? why : "unknown");
  size_t n = strlen(reason);
  while (n && (reason[n - 1] == '\n' || reason[n - 1] == ' ')) reason[--n] = 0;
  drop_link();
  fail_all(reason);
  if (on_lost) on_lost(reason);
  schedule_retry();
}

static void watch(int events) { uv_poll_start(&link->poll, events, on_poll); }

static void ignore_notice(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

static void on_connect_timeout(uv_timer_t *t) {
  (void)t;
  lost("connection attempt timed out");
}

static void attempt(void) {
  if (stopped) return;
  link_t *l = calloc(1, sizeof(*l));
  if (l == NULL) abort();
  /* The URL is the operator's; the application name only fills a gap, so
   * pg_stat_activity can tell the broker's backend apart. */
  const char *keys[] = {"dbname", "fallback_application_name", NULL};
  const char *values[] = {url, "ephd", NULL};
  l->conn = PQconnectStartParams(keys, values, 1);
  link = l;
  if (l->conn == NULL || PQstatus(l->conn) == CONNECTION_BAD) {
    lost(l->conn ? PQerrorMessage(l->conn) : "out of memory");
    return;
  }
  PQsetnonblocking(l->conn, 1);
  /* Server notices ("already exists, skipping") are not the log's business. */
  PQsetNoticeProcessor(l->conn, ignore_notice, NULL);
  l->fd = PQsocket(l->conn);
  if (uv_poll_init_socket(loop, &l->poll, l->fd) != 0) {
    lost("cannot poll the database socket");
    return;
  }
  l->poll.data = l;
  l->polling = 1;
  uv_timer_start(&connect_timer, on_connect_timeout, CONNECT_TIMEOUT_MS, 0);
  watch(UV_WRITABLE);
}

static void connecting(void) {
  PostgresPollingStatusType st = PQconnectPoll(link->conn);
  /* A multi-host URL can move to another socket while connecting; the poll
   * handle is bound to the first, so start over rather than watch a stale
   * descriptor. One host never moves. */
  if (st != PGRES_POLLING_FAILED && PQsocket(link->conn) != link->fd) {
    lost("the database socket moved while connecting");
    return;
  }
  switch (st) {
    case PGRES_POLLING_READING:
      watch(UV_READABLE);
      return;
    case PGRES_POLLING_WRITING:
      watch(UV_WRITABLE);
      return;
    case PGRES_POLLING_FAILED:
      lost(PQerrorMessage(link->conn));
      return;
    case PGRES_POLLING_OK:
      uv_timer_stop(&connect_timer);
      connected = 1;
      backoff_ms = BACKOFF_MIN_MS;
      watch(UV_READABLE);
      if (on_connected) on_connected();
      pump();
      return;
    default:
      return;
  }
}

/* Sends the first job if nothing is in flight. */
static void pump(void) {
  if (!connected || in_flight || jobs.head == NULL) return;
  job_t *j = EPHD_ENTRY(jobs.head, job_t, link);
  if (!PQsendQueryParams(link->conn, j->sql, j->nparams, NULL,
                         (const char *const *)j->values, j->lengths, NULL, 0)) {
    lost(PQerrorMessage(link->conn));
    return;
  }
  in_flight = 1;
  last_error[0] = 0;
  int f = PQflush(link->conn);
  if (f < 0) {
    lost(PQerrorMessage(link->conn));
    return;
  }
  watch(f ? UV_READABLE | UV_WRITABLE : UV_READABLE);
}

static void finish_job(void) {
  job_t *j = take_first();
  in_flight = 0;
  PGresult *res = last_result;
  last_result = NULL;
  if (last_error[0] || res == NULL) {
    j->cb(j->data, NULL, last_error[0] ? last_error : "no result");
  } else {
    j->cb(j->data, res, NULL);
  }
  if (res) PQclear(res);
  job_free(j);
}

static void readable(void) {
  if (!PQconsumeInput(link->conn)) {
    lost(PQerrorMessage(link->conn));
    return;
  }
  while (in_flight && !PQisBusy(link->conn)) {
    PGresult *res = PQgetResult(link->conn);
    if (res == NULL) {
      finish_job();
      if (link == NULL) return; /* a callback stopped the client */
      pump();
      continue;
    }
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      if (!last_error[0])
        snprintf(last_error, sizeof(last_error), "%s",
                 PQresultErrorMessage(res));
      PQclear(res);
      continue;
    }
    /* Of a multi-statement query, the last result is the answer. */
    if (last_result) PQclear(last_result);
    last_result = res;
  }
  if (PQstatus(link->conn) == CONNECTION_BAD) lost(PQerrorMessage(link->conn));
}

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)p;
  if (link == NULL) return;
  if (status < 0) {
    lost(uv_strerror(status));
    return;
  }
  if (!connected) {
    connecting();
    return;
  }
  if (events & UV_WRITABLE) {
    int f = PQflush(link->conn);
    if (f < 0) {
      lost(PQerrorMessage(link->conn));
      return;
    }
    if (f == 0) watch(UV_READABLE);
  }
  if (events & UV_READABLE) readable();
}

void ephd_pg_start(uv_loop_t *l, const char *u, ephd_pg_connected_cb c,
                   ephd_pg_lost_cb lo) {
  loop = l;
  url = strdup(u);
  on_connected = c;
  on_lost = lo;
  stopped = 0;
  uv_timer_init(loop, &retry_timer);
  uv_timer_init(loop, &connect_timer);
  uv_unref((uv_handle_t *)&retry_timer);
  uv_unref((uv_handle_t *)&connect_timer);
  attempt();
}

int ephd_pg_connected(void) { return connected; }

int ephd_pg_query(const char *sql, int nparams, const char *const *values,
                  const int *lengths, ephd_pg_cb cb, void *data) {
  if (!connected) return -1;
  job_t *j = calloc(1, sizeof(*j));
  if (j == NULL) abort();
  j->sql = strdup(sql);
  j->nparams = nparams;
  j->values = calloc((size_t)(nparams ? nparams : 1), sizeof(char *));
  j->lengths = calloc((size_t)(nparams ? nparams : 1), sizeof(int));
  for (int i = 0; i < nparams; i++) {
    j->lengths[i] = lengths[i];
    j->values[i] = malloc((size_t)lengths[i] + 1);
    memcpy(j->values[i], values[i], (size_t)lengths[i]);
    j->values[i][lengths[i]] = 0; /* text parameters are NUL-terminated */
  }
  j->cb = cb;
  j->data = data;
  ephd_list_append(&jobs, &j->link);
  pump();
  return 0;
}

void ephd_pg_stop(void) {
  if (url == NULL) return;
  stopped = 1;
  connected = 0;
  uv_timer_stop(&retry_timer);
  uv_timer_stop(&connect_timer);
  uv_close((uv_handle_t *)&retry_timer, NULL);
  uv_close((uv_handle_t *)&connect_timer, NULL);
  if (last_result) PQclear(last_result);
  last_result = NULL;
  drop_link();
  fail_all("the broker is stopping");
  free(url);
  url = NULL;
}
