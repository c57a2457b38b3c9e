/* ephd-load: the load generator of bench/run. One libuv loop, one mode per
 * run, a fixed count of messages or round trips (never a fixed time), and
 * one logfmt line of figures at the end. It speaks ephd's HTTP wire and
 * Redis's RESP with the same code paths, so a ratio compares the servers and
 * not two clients. It exits non-zero when a reply is not the one the mode
 * expects or a message goes missing: a figure from a broken run is not one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "client.h"

/* A cell's brokers: --port and --pid take comma-separated lists. */
#define MAX_SERVERS 8
/* push --partitions: at most this many names. */
#define MAX_PARTITIONS 256

typedef struct {
  const char *mode;
  int port; /* the first of ports */
  int ports[MAX_SERVERS];
  uint32_t nports;
  uint32_t conns, pipeline, batch, size, inboxes, queues;
  uint64_t count;
  double hold_s;
  int pid; /* the first of pids: its RSS is read */
  int pids[MAX_SERVERS];
  uint32_t npids;
  const char *partitions[MAX_PARTITIONS];
  uint32_t npartitions;
  uint32_t walk; /* push --partitions: the step between a connection's pushes */
  const char *queue, *group;
} options_t;

static options_t opt = {
    .port = 6632,
    .ports = {6632},
    .nports = 1,
    .conns = 50,
    .pipeline = 1,
    .batch = 1,
    .size = 256,
    .inboxes = 100000,
    .queues = 1,
    .count = 100000,
    .hold_s = 10,
    .queue = "bench",
    .group = "g",
};

static uv_loop_t *loop;
static load_conn_t *conns;
static uint32_t connected;
static uint64_t started_ns, finished_ns;
static uint64_t sent, done, errors, messages;
static uint32_t *latencies_us;
static uint64_t nlatencies;
/* The one request a closed-loop mode repeats, pipeline copies of it; push
 * --partitions: one per partition, connection i's kth send the
 * ((i + k * walk) % n)th. */
static load_buf_t requests[MAX_PARTITIONS];
static uint32_t nrequests = 1;

static void fail(load_conn_t *c, int status, const char *body, size_t len) {
  errors++;
  if (errors <= 3)
    fprintf(stderr, "ephd-load: unexpected reply %d on connection %u: %.*s\n",
            status, c->index, (int)(len > 200 ? 200 : len), body ? body : "");
}

/* Process readings of the server under test (--pid) ---------------------
 * Its RSS (park, memory) and its CPU: user + system time of all its threads
 * over the measured interval, in the clock ticks /proc counts (10 ms here),
 * so a run must last long enough for the ticks to count. */

static long rss_kib(void) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", opt.pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) load_die("no such process", path);
  long kib = -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  fclose(f);
  return kib;
}

static double cpu_seconds_of(int pid) {
  char path[64], text[2048];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) load_die("no such process", path);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = 0;
  /* Fields after the command name, which may hold spaces: utime is the
   * 14th field, stime the 15th. */
  char *p = strrchr(text, ')');
  unsigned long utime = 0, stime = 0;
  if (p == NULL ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
             &utime, &stime) != 2)
    load_die("unreadable", path);
  return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* Every server's, summed: a cell's CPU per message is its brokers'. */
static double cpu_seconds(void) {
  double sum = 0;
  for (uint32_t i = 0; i < opt.npids; i++) sum += cpu_seconds_of(opt.pids[i]);
  return sum;
}

/* The generator's own user + system time (getrusage counts it finer than
 * /proc's ticks): in a cell's runs it shares the brokers' cores, so what it
 * spends is CPU they did not get. */
static double own_cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The measured interval: from the moment every connection is open (park:
 * every pop has been parked for the hold) to the last expected reply. */
static double cpu_started, cpu_finished, own_started, own_finished;

static void start_measuring(void) {
  started_ns = uv_hrtime();
  own_started = own_cpu_seconds();
  if (opt.pid) cpu_started = cpu_seconds();
}

static int finished;

static void finish(void) {
  finished_ns = uv_hrtime();
  own_finished = own_cpu_seconds();
  if (opt.pid) cpu_finished = cpu_seconds();
  finished = 1;
  for (uint32_t i = 0; i < opt.conns; i++) load_conn_close(&conns[i]);
  uv_stop(loop);
}

static void record_latency(uint64_t since_ns) {
  latencies_us[nlatencies++] = (uint32_t)((uv_hrtime() - since_ns) / 1000);
}

/* Counts occurrences of a literal in a body. */
static uint64_t count_of(const char *body, size_t len, const char *needle) {
  uint64_t n = 0;
  size_t k = strlen(needle);
  const char *p = body, *end = body + len;
  while (p && p + k <= end) {
    p = memmem(p, (size_t)(end - p), needle, k);
    if (p) {
      n++;
      p += k;
    }
  }
  return n;
}

static void json_payload(load_buf_t *b, uint32_t size) {
  load_buf_add(b, "\"", 1);
  for (uint32_t i = 2; i < size; i++) load_buf_add(b, "x", 1);
  load_buf_add(b, "\"", 1);
}

static void push_body(load_buf_t *b, const char *queue, const char *partition,
                      uint32_t batch, uint32_t size) {
  load_buf_addf(b, "{\"queue\":\"%s\",", queue);
  if (partition) load_buf_addf(b, "\"partition\":\"%s\",", partition);
  load_buf_add(b, "\"messages\":[", 12);
  for (uint32_t i = 0; i < batch; i++) {
    load_buf_add(b, i ? ",{\"payload\":" : "{\"payload\":", i ? 12 : 11);
    json_payload(b, size);
    load_buf_add(b, "}", 1);
  }
  load_buf_add(b, "]}", 2);
}

static void http_push_to(load_buf_t *b, const char *queue,
                         const char *partition, uint32_t batch, uint32_t size) {
  load_buf_t body = {0};
  push_body(&body, queue, partition, batch, size);
  load_http_request(b, "POST", "/api/v1/ephemeral/push", body.data, body.len);
  free(body.data);
}

static void http_push(load_buf_t *b, const char *queue, uint32_t batch,
                      uint32_t size) {
  http_push_to(b, queue, NULL, batch, size);
}

/* Closed loop: get, push, lpush, rpop -------------------------------------
 * Each connection keeps `pipeline` requests in flight until `count` requests
 * have been sent; a request carries `batch` messages. */

static int closed_expect;
static uint64_t closed_requests;

/* One message per round trip (no batch, no pipelining): each is timed,
 * and a round trip is a message, so per_s keeps its unit. */
static int closed_timed;

static void closed_send(load_conn_t *c) {
  if (sent >= closed_requests) return;
  uint32_t n = opt.pipeline;
  if (sent + n > closed_requests) n = (uint32_t)(closed_requests - sent);
  sent += n;
  c->outstanding = n;
  const load_buf_t *r =
      &requests[(c->index + c->sends++ * opt.walk) % nrequests];
  if (closed_timed) c->stamp = uv_hrtime();
  load_conn_send(c, r->data, r->len / opt.pipeline * n);
}

static void closed_reply(load_conn_t *c, int status, const char *body,
                         size_t len) {
  if (status != closed_expect) fail(c, status, body, len);
  if (closed_timed) record_latency(c->stamp);
  done++;
  if (--c->outstanding == 0) closed_send(c);
  if (done == closed_requests) finish();
}

static void closed_start(load_conn_t *c) { closed_send(c); }

static void closed_setup(void) {
  const char *m = opt.mode;
  closed_requests = (opt.count + opt.batch - 1) / opt.batch;
  for (uint32_t i = 0; i < opt.pipeline; i++) {
    if (strcmp(m, "get") == 0) {
      load_http_request(&requests[0], "GET", "/", NULL, 0);
      closed_expect = 200;
    } else if (strcmp(m, "push") == 0) {
      nrequests = opt.npartitions ? opt.npartitions : 1;
      for (uint32_t k = 0; k < nrequests; k++)
        http_push_to(&requests[k], opt.queue,
                     opt.npartitions ? opt.partitions[k] : NULL, opt.batch,
                     opt.size);
      closed_expect = 201;
    } else if (strcmp(m, "lpush") == 0) {
      char *value = malloc(opt.size);
      memset(value, 'x', opt.size);
      const char *argv[] = {"LPUSH", opt.queue, value};
      size_t lens[] = {5, strlen(opt.queue), opt.size};
      load_resp_command(&requests[0], 3, argv, lens);
      free(value);
      closed_expect = ':';
    } else {
      const char *argv[] = {"RPOP", opt.queue};
      size_t lens[] = {4, strlen(opt.queue)};
      load_resp_command(&requests[0], 2, argv, lens);
      closed_expect = '$'; /* a nil here is a message that is not there */
    }
  }
  messages = opt.count;
  closed_timed =
      opt.batch == 1 && opt.pipeline == 1 && m[0] != 'l' && m[0] != 'r';
}

/* drain: pop a batch for one group, ack exactly those ids, again ----------
 * A connection stops at its first empty pop; every id must come back
 * `acked`, and the run must see exactly `count` messages. */

static char drain_pop[512];
static size_t drain_pop_len;
static uint32_t drain_idle;

/* A connection with acks outstanding waits for the ack's answer; with none,
 * for its pop's. */
static void drain_next(load_conn_t *c) {
  c->outstanding = 0;
  load_conn_send(c, drain_pop, drain_pop_len);
}

static void drain_ack(load_conn_t *c, const char *body, size_t len) {
  load_buf_t ack = {0}, req = {0};
  load_buf_addf(&ack, "{\"queue\":\"%s\",\"group\":\"%s\",\"acks\":[",
                opt.queue, opt.group);
  const char *p = body, *end = body + len;
  uint32_t n = 0;
  while ((p = memmem(p, (size_t)(end - p), "\"id\":\"", 6)) != NULL) {
    p += 6;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (q == NULL) break;
    load_buf_addf(&ack, "%s{\"id\":\"%.*s\"}", n ? "," : "", (int)(q - p), p);
    n++;
    p = q;
  }
  load_buf_add(&ack, "]}", 2);
  c->outstanding = n;
  load_http_request(&req, "POST", "/api/v1/ephemeral/ack", ack.data, ack.len);
  load_conn_send(c, req.data, req.len);
  free(ack.data);
  free(req.data);
}

static void drain_reply(load_conn_t *c, int status, const char *body,
                        size_t len) {
  if (status != 200) {
    fail(c, status, body, len);
    finish();
    return;
  }
  if (c->outstanding == 0) {
    if (count_of(body, len, "\"id\":\"") == 0) {
      if (++drain_idle == opt.conns) finish();
      return;
    }
    drain_ack(c, body, len);
    if (c->outstanding == 0) fail(c, status, body, len); /* ids unreadable */
    return;
  }
  uint64_t acked = count_of(body, len, "\"outcome\":\"acked\"");
  if (acked != c->outstanding) fail(c, status, body, len);
  messages += acked;
  drain_next(c);
}

static void drain_setup(void) {
  drain_pop_len = (size_t)snprintf(
      drain_pop, sizeof(drain_pop),
      "GET /api/v1/ephemeral/pop?queue=%s&group=%s&batch=%u HTTP/1.1\r\n"
      "Host: bench\r\n\r\n",
      opt.queue, opt.group, opt.batch);
}

/* wake / brpop: one parked pop, woken by a push on another connection -----
 * Connection 0 parks, and after a millisecond (so it is surely parked)
 * connection 1 pushes; the latency is push-sent to pop-received. */

static uv_timer_t wake_timer;
static load_buf_t wake_park, wake_push;
static int wake_replies;

static void wake_fire(uv_timer_t *t) {
  conns[1].stamp = uv_hrtime();
  load_conn_send(&conns[1], wake_push.data, wake_push.len);
}

static void wake_round(void) {
  wake_replies = 0;
  load_conn_send(&conns[0], wake_park.data, wake_park.len);
  uv_timer_start(&wake_timer, wake_fire, 1, 0);
}

static void wake_reply(load_conn_t *c, int status, const char *body,
                       size_t len) {
  int redis = c->proto == LOAD_RESP;
  if (c->index == 0) {
    record_latency(conns[1].stamp);
    int one = redis ? status == '*' && len == opt.size
                    : status == 200 && count_of(body, len, "\"id\":\"") == 1;
    if (!one) fail(c, status, body, len);
    messages++;
  } else if (status != (redis ? ':' : 201)) {
    fail(c, status, body, len);
  }
  if (++wake_replies < 2) return;
  if (++done == opt.count) {
    finish();
    return;
  }
  wake_round();
}

static void wake_start(load_conn_t *c) {
  if (c->index == 0) wake_round();
}

static void wake_setup(void) {
  opt.conns = 2;
  uv_timer_init(loop, &wake_timer);
  if (strcmp(opt.mode, "brpop") == 0) {
    char *value = malloc(opt.size);
    memset(value, 'x', opt.size);
    const char *pop[] = {"BRPOP", opt.queue, "0"};
    size_t pop_lens[] = {5, strlen(opt.queue), 1};
    load_resp_command(&wake_park, 3, pop, pop_lens);
    const char *push[] = {"LPUSH", opt.queue, value};
    size_t push_lens[] = {5, strlen(opt.queue), opt.size};
    load_resp_command(&wake_push, 3, push, push_lens);
    free(value);
  } else {
    char path[600];
    snprintf(path, sizeof(path),
             "/api/v1/ephemeral/pop?queue=%s&wait=true&timeout=30000&autoAck="
             "true",
             opt.queue);
    load_http_request(&wake_park, "GET", path, NULL, 0);
    http_push(&wake_push, opt.queue, 1, opt.size);
  }
}

static long rss_before, rss_after;
static double cpu_percent = -1;

/* park: conns pops parked for hold_s, then all woken by pushes ------------
 * RSS is read before any connection and while all are parked; the broker's
 * CPU is read across the hold. Every parked pop must then get one message.
 */

static uv_timer_t park_timer;
static load_buf_t park_request;
static uint32_t park_opening;
static double park_cpu0;
static load_conn_t park_pusher;

static void park_open_more(void);

static void park_connected(load_conn_t *c) {
  load_conn_send(c, park_request.data, park_request.len);
  park_opening--;
  if (++connected < opt.conns) park_open_more();
}

static void park_reply(load_conn_t *c, int status, const char *body,
                       size_t len) {
  if (c == &park_pusher) {
    if (status != 201) fail(c, status, body, len);
    return;
  }
  if (status != 200 || count_of(body, len, "\"id\":\"") != 1)
    fail(c, status, body, len);
  messages++;
  if (++done == opt.conns) {
    load_conn_close(&park_pusher);
    finish();
  }
}

static void park_open_more(void) {
  /* A few hundred connects at a time: a burst of ten thousand overflows the
   * listen backlog and turns into SYN retries a second apart. */
  while (park_opening < 256 && sent < opt.conns) {
    park_opening++;
    load_conn_t *c = &conns[sent++];
    load_conn_open(loop, c, LOAD_HTTP, opt.port, park_connected, park_reply);
  }
}

static void park_wake_all(load_conn_t *c) {
  load_buf_t b = {0};
  for (uint32_t left = opt.conns; left > 0;) {
    uint32_t n = left > 1000 ? 1000 : left;
    http_push(&b, opt.queue, n, 16);
    left -= n;
  }
  load_conn_send(c, b.data, b.len);
  free(b.data);
}

static void park_held(uv_timer_t *t) {
  double cpu = cpu_seconds() - park_cpu0;
  cpu_percent = 100.0 * cpu / opt.hold_s;
  rss_after = rss_kib();
  start_measuring();
  load_conn_open(loop, &park_pusher, LOAD_HTTP, opt.port, park_wake_all,
                 park_reply);
}

static void park_settled(uv_timer_t *t) {
  if (connected < opt.conns) return; /* still opening: look again */
  uv_timer_stop(t);
  park_cpu0 = cpu_seconds();
  uv_timer_start(t, park_held, (uint64_t)(opt.hold_s * 1000), 0);
}

static void park_setup(void) {
  char path[600];
  snprintf(path, sizeof(path),
           "/api/v1/ephemeral/pop?queue=%s&wait=true&timeout=300000",
           opt.queue);
  load_http_request(&park_request, "GET", path, NULL, 0);
  rss_before = rss_kib();
  uv_timer_init(loop, &park_timer);
  /* One second after the last connection, every pop is parked. */
  uv_timer_start(&park_timer, park_settled, 1000, 1000);
  park_open_more();
}

/* pushpop: per connection, one push and one pop pipelined, over `queues`
 * queues. The pop follows its own push on the connection, so across all
 * connections a pop never finds its queue empty when queues is 1, and each
 * connection owns its queues otherwise: every pop must return one message. */

static void pushpop_send(load_conn_t *c) {
  if (sent >= opt.count) return;
  uint64_t k = sent++ % opt.queues;
  char queue[64], path[160];
  snprintf(queue, sizeof(queue), "inbox-%llu", (unsigned long long)k);
  snprintf(path, sizeof(path), "/api/v1/ephemeral/pop?queue=%s&autoAck=true",
           queue);
  load_buf_t b = {0};
  http_push(&b, queue, 1, opt.size);
  load_http_request(&b, "GET", path, NULL, 0);
  c->outstanding = 2;
  load_conn_send(c, b.data, b.len);
  free(b.data);
}

static void pushpop_reply(load_conn_t *c, int status, const char *body,
                          size_t len) {
  if (c->outstanding == 2) {
    if (status != 201) fail(c, status, body, len);
  } else if (status != 200 || count_of(body, len, "\"id\":\"") != 1) {
    fail(c, status, body, len);
  } else {
    messages++;
  }
  if (--c->outstanding > 0) return;
  if (++done == opt.count) {
    finish();
    return;
  }
  pushpop_send(c);
}

/* inbox: request/reply, each client's reply into its own implicit inbox ---
 * A client parks a pop on inbox-i, then pushes a request naming inbox-i to
 * `requests`; responders pop requests and push each reply to the inbox it
 * names. The round trip is request-sent to reply-received. Clients are
 * conns[0..2n) in pairs (inbox, request); responders follow. */

#define RESPONDERS 4
static uint64_t inbox_next;
static uint32_t clients;

static void inbox_round(uint32_t k) {
  load_conn_t *in = &conns[2 * k], *out = &conns[2 * k + 1];
  if (sent >= opt.count) return;
  sent++;
  uint64_t i = inbox_next++ % opt.inboxes;
  char inbox[64], path[200], payload[80];
  snprintf(inbox, sizeof(inbox), "inbox-%llu", (unsigned long long)i);
  snprintf(path, sizeof(path),
           "/api/v1/ephemeral/pop?queue=%s&wait=true&timeout=30000&autoAck="
           "true",
           inbox);
  load_buf_t b = {0};
  load_http_request(&b, "GET", path, NULL, 0);
  load_conn_send(in, b.data, b.len);
  b.len = 0;
  int n = snprintf(
      payload, sizeof(payload),
      "{\"queue\":\"requests\",\"messages\":[{\"payload\":\"%s\"}]}", inbox);
  load_http_request(&b, "POST", "/api/v1/ephemeral/push", payload, (size_t)n);
  in->outstanding = 2;
  in->stamp = uv_hrtime();
  load_conn_send(out, b.data, b.len);
  free(b.data);
}

static load_buf_t responder_pop;

static void inbox_reply(load_conn_t *c, int status, const char *body,
                        size_t len) {
  if (c->index >= 2 * clients) { /* a responder */
    if (c->outstanding > 0) {    /* a reply push's answer */
      if (status != 201) fail(c, status, body, len);
      if (--c->outstanding == 0)
        load_conn_send(c, responder_pop.data, responder_pop.len);
      return;
    }
    if (status != 200) {
      fail(c, status, body, len);
      return;
    }
    load_buf_t b = {0};
    const char *p = body, *end = body + len;
    while ((p = memmem(p, (size_t)(end - p), "\"payload\":\"", 11)) != NULL) {
      p += 11;
      const char *q = memchr(p, '"', (size_t)(end - p));
      char reply[120];
      int n = snprintf(reply, sizeof(reply),
                       "{\"queue\":\"%.*s\",\"messages\":[{\"payload\":1}]}",
                       (int)(q - p), p);
      load_http_request(&b, "POST", "/api/v1/ephemeral/push", reply, (size_t)n);
      c->outstanding++;
      p = q;
    }
    if (c->outstanding == 0)
      load_conn_send(c, responder_pop.data, responder_pop.len);
    else
      load_conn_send(c, b.data, b.len);
    free(b.data);
    return;
  }
  load_conn_t *in = &conns[c->index & ~1u];
  if (c == in) {
    record_latency(in->stamp);
    if (status != 200 || count_of(body, len, "\"id\":\"") != 1)
      fail(c, status, body, len);
    else
      messages++;
  } else if (status != 201) {
    fail(c, status, body, len);
  }
  if (--in->outstanding > 0) return;
  if (++done == opt.count) {
    finish();
    return;
  }
  inbox_round(c->index / 2);
}

static void inbox_start(load_conn_t *c) {
  if (c->index >= 2 * clients)
    load_conn_send(c, responder_pop.data, responder_pop.len);
  else if (c->index % 2 == 1)
    inbox_round(c->index / 2);
}

static void inbox_setup(void) {
  clients = opt.conns;
  opt.conns = 2 * clients + RESPONDERS;
  load_http_request(&responder_pop, "GET",
                    "/api/v1/ephemeral/pop?queue=requests&wait=true&batch=100"
                    "&autoAck=true&timeout=300000",
                    NULL, 0);
}

/* The run ---------------------------------------------------------------- */

static load_connect_cb mode_start;

static void on_connect(load_conn_t *c) {
  if (++connected < opt.conns) return;
  start_measuring();
  for (uint32_t i = 0; i < opt.conns; i++) mode_start(&conns[i]);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static uint32_t percentile(double p) {
  if (nlatencies == 0) return 0;
  uint64_t i = (uint64_t)(p * (double)(nlatencies - 1) + 0.5);
  return latencies_us[i];
}

static void usage(void) {
  fputs(
      "usage: ephd-load MODE [--port N] [--conns N] [--count N] [--batch N]\n"
      "       [--size BYTES] [--pipeline N] [--queue NAME] [--group NAME]\n"
      "       [--queues N] [--inboxes N] [--pid PID] [--hold SECONDS]\n"
      "       [--partitions NAME,...] [--walk STEP]\n"
      "modes: get push lpush rpop drain wake brpop park pushpop inbox\n"
      "Prints one logfmt line: mode, count, seconds, per_s (messages or\n"
      "round trips per second), latency percentiles, rss and cpu where the\n"
      "mode reads them, errors. With --pid, also the server's user+system\n"
      "CPU over the measured run: cpu_s, and cpu_us per message or round\n"
      "trip (the unit of per_s); always the generator's own, gen_cpu_s and\n"
      "gen_cpu_us. Exits 1 on any unexpected reply.\n"
      "A cell: --port A,B spreads the connections over the brokers\n"
      "(connection i on the (i % n)th), --pid A,B sums their CPU (RSS is\n"
      "the first's); push --partitions P,Q,... sends connection i's\n"
      "pushes to the (i % n)th partition, and with --walk STEP its kth\n"
      "push to the ((i + k * STEP) % n)th. A push of one message without\n"
      "pipelining is timed: p50_us, p99_us.\n",
      stderr);
  exit(2);
}

/* "N[,N...]" into out (at most MAX_SERVERS); the count. */
static uint32_t list(const char *v, int *out) {
  uint32_t n = 0;
  for (const char *p = v; *p && n < MAX_SERVERS; n++) {
    out[n] = atoi(p);
    if (out[n] <= 0) usage();
    p = strchr(p, ',');
    if (p == NULL) return n + 1;
    p++;
  }
  usage();
  return 0;
}

/* "NAME[,NAME...]", split in place. */
static void partitions(char *v) {
  for (char *p = strtok(v, ","); p; p = strtok(NULL, ",")) {
    if (opt.npartitions == MAX_PARTITIONS) usage();
    opt.partitions[opt.npartitions++] = p;
  }
}

static void parse_args(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') usage();
  opt.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) usage();
    i++;
    if (strcmp(k, "--port") == 0)
      opt.nports = list(v, opt.ports);
    else if (strcmp(k, "--conns") == 0)
      opt.conns = (uint32_t)atoi(v);
    else if (strcmp(k, "--count") == 0)
      opt.count = strtoull(v, NULL, 10);
    else if (strcmp(k, "--batch") == 0)
      opt.batch = (uint32_t)atoi(v);
    else if (strcmp(k, "--size") == 0)
      opt.size = (uint32_t)atoi(v);
    else if (strcmp(k, "--pipeline") == 0)
      opt.pipeline = (uint32_t)atoi(v);
    else if (strcmp(k, "--queue") == 0)
      opt.queue = v;
    else if (strcmp(k, "--group") == 0)
      opt.group = v;
    else if (strcmp(k, "--queues") == 0)
      opt.queues = (uint32_t)atoi(v);
    else if (strcmp(k, "--inboxes") == 0)
      opt.inboxes = (uint32_t)atoi(v);
    else if (strcmp(k, "--pid") == 0)
      opt.npids = list(v, opt.pids);
    else if (strcmp(k, "--partitions") == 0)
      partitions(v);
    else if (strcmp(k, "--walk") == 0)
      opt.walk = (uint32_t)atoi(v);
    else if (strcmp(k, "--hold") == 0)
      opt.hold_s = atof(v);
    else
      usage();
  }
  opt.port = opt.ports[0];
  opt.pid = opt.pids[0];
  if (opt.conns == 0 || opt.count == 0 || opt.batch == 0 || opt.pipeline == 0 ||
      opt.queues == 0 || opt.inboxes == 0 || opt.size < 2)
    usage();
}

int main(int argc, char **argv) {
  parse_args(argc, argv);
  loop = uv_default_loop();
  const char *m = opt.mode;
  load_reply_cb reply;
  load_proto_t proto = LOAD_HTTP;
  int parks = 0, spin = 0;
  if (strcmp(m, "get") == 0 || strcmp(m, "push") == 0 ||
      strcmp(m, "lpush") == 0 || strcmp(m, "rpop") == 0) {
    closed_setup();
    mode_start = closed_start;
    reply = closed_reply;
    if (m[0] == 'l' || m[0] == 'r') proto = LOAD_RESP;
  } else if (strcmp(m, "drain") == 0) {
    drain_setup();
    mode_start = drain_next;
    reply = drain_reply;
  } else if (strcmp(m, "wake") == 0 || strcmp(m, "brpop") == 0) {
    wake_setup();
    mode_start = wake_start;
    spin = 1;
    reply = wake_reply;
    if (m[0] == 'b') proto = LOAD_RESP;
  } else if (strcmp(m, "park") == 0) {
    parks = 1;
    opt.count = opt.conns; /* one message per parked pop */
    reply = park_reply;
  } else if (strcmp(m, "pushpop") == 0) {
    mode_start = pushpop_send;
    reply = pushpop_reply;
  } else if (strcmp(m, "inbox") == 0) {
    inbox_setup();
    mode_start = inbox_start;
    reply = inbox_reply;
  } else {
    usage();
    return 2;
  }
  conns = calloc(opt.conns, sizeof(*conns));
  latencies_us = calloc(opt.count, sizeof(*latencies_us));
  if (conns == NULL || latencies_us == NULL) load_die("out of memory", m);
  for (uint32_t i = 0; i < opt.conns; i++) conns[i].index = i;
  if (opt.pid && !parks) rss_before = rss_kib();

  if (parks) {
    park_setup();
  } else {
    for (uint32_t i = 0; i < opt.conns; i++)
      load_conn_open(loop, &conns[i], proto, opt.ports[i % opt.nports],
                     on_connect, reply);
  }
  if (spin) {
    /* The latency modes poll without sleeping, so a round trip measures the
     * server's wake-up and not also this process's own (a halted core is
     * slow to wake in a VM): the same for every server measured. */
    while (!finished) uv_run(loop, UV_RUN_NOWAIT);
  } else {
    uv_run(loop, UV_RUN_DEFAULT);
  }
  /* Every queue drained dry: what it held and what came out must agree. */
  if (strcmp(m, "drain") == 0 && messages != opt.count) {
    fprintf(stderr, "ephd-load: drained %llu messages, expected %llu\n",
            (unsigned long long)messages, (unsigned long long)opt.count);
    errors++;
  }
  if (opt.pid && !parks) rss_after = rss_kib();

  double seconds = (double)(finished_ns - started_ns) / 1e9;
  /* per_s and cpu_us count the same unit: round trips where the mode times
   * them, messages otherwise. */
  double units = (double)(nlatencies ? nlatencies : messages);
  qsort(latencies_us, nlatencies, sizeof(*latencies_us), cmp_u32);
  printf("mode=%s count=%llu messages=%llu seconds=%.3f per_s=%.0f", m,
         (unsigned long long)opt.count, (unsigned long long)messages, seconds,
         units / seconds);
  if (nlatencies)
    printf(" p50_us=%u p99_us=%u", percentile(0.50), percentile(0.99));
  if (opt.pid)
    printf(" rss_before_kib=%ld rss_after_kib=%ld", rss_before, rss_after);
  if (cpu_percent >= 0) printf(" cpu_percent=%.3f", cpu_percent);
  if (opt.pid) {
    double cpu = cpu_finished - cpu_started;
    printf(" cpu_s=%.2f cpu_us=%.2f", cpu, units > 0 ? cpu * 1e6 / units : 0);
  }
  double own = own_finished - own_started;
  printf(" gen_cpu_s=%.3f gen_cpu_us=%.2f", own,
         units > 0 ? own * 1e6 / units : 0);
  printf(" errors=%llu\n", (unsigned long long)errors);
  return errors ? 1 : 0;
}
