#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static ephd_settings_t *current;

const ephd_config_t *ephd_ffi_config(void) { return &current->lua; }

int ephd_ffi_abi_version(void) { return EPHD_FFI_ABI_VERSION; }

typedef enum { K_U64, K_BOOL } kind_t;

typedef struct {
  const char *name;
  const char *fallback; /* the default, as an operator would type it */
  uint64_t min, max;
  kind_t kind;
  size_t offset;
  const char *help;
} knob_t;

#define AT(field) offsetof(ephd_settings_t, field)
#define MiB(n) ((uint64_t)(n) << 20)

static const knob_t knobs[] = {
    {"QUEEN_EPHEMERAL_MAX_BYTES", "268435456", 1, UINT64_MAX >> 1, K_U64,
     AT(lua.max_cell_bytes),
     "the whole broker's ephemeral footprint: payloads, names, rings (503)"},
    {"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES", "16777216", 1, UINT64_MAX >> 1, K_U64,
     AT(lua.defaults.max_bytes),
     "a queue's maxBytes over its partitions: default and ceiling"},
    {"QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH", "10000", 1, UINT32_MAX, K_U64,
     AT(lua.defaults.max_length),
     "a queue's maxLength over its partitions: default and ceiling"},
    {"QUEEN_EPHEMERAL_LEASE_S", "30", 1, 86400, K_U64, AT(lua.defaults.lease_s),
     "default leaseSeconds before an unacked message is redelivered"},
    {"QUEEN_EPHEMERAL_RETRY_LIMIT", "5", 0, 1000, K_U64,
     AT(lua.defaults.retry_limit), "default retryLimit: deliveries per group"},
    {"QUEEN_EPHEMERAL_POP_TIMEOUT_MS", "30000", 0, 300000, K_U64,
     AT(lua.pop_timeout_ms), "a waiting pop's timeout when it names none"},
    {"QUEEN_EPHEMERAL_MAX_BODY_BYTES", "67108864", 1024, UINT32_MAX, K_U64,
     AT(max_body_bytes), "largest request body (413 past it)"},
    {"QUEEN_EPHEMERAL_MAX_HEADER_BYTES", "65536", 1024, MiB(16), K_U64,
     AT(max_header_bytes), "largest request head in raw bytes (431 past it)"},
    {"QUEEN_EPHEMERAL_IDLE_TIMEOUT_S", "300", 1, 86400, K_U64,
     AT(idle_timeout_s), "a keep-alive connection with no request is closed"},
    {"QUEEN_EPHEMERAL_HEADER_TIMEOUT_MS", "10000", 100, 600000, K_U64,
     AT(header_timeout_ms), "a request's headers must arrive within (408)"},
    {"QUEEN_EPHEMERAL_BODY_TIMEOUT_MS", "60000", 100, 3600000, K_U64,
     AT(body_timeout_ms), "a request's body must arrive within (408)"},
    {"QUEEN_EPHEMERAL_MAX_UNWRITTEN_BYTES", "1048576", 65536, MiB(1024), K_U64,
     AT(max_unwritten_bytes),
     "a connection's unwritten answers before its pipelined requests wait"},
    {"QUEEN_EPHEMERAL_MAX_CLIENT_BYTES", "1073741824", 0, UINT64_MAX >> 1,
     K_U64, AT(max_client_bytes),
     "every connection's buffers together; past it the largest is closed "
     "(0: no limit)"},
    {"QUEEN_EPHEMERAL_MAX_PARTITIONS", "10000", 1, 1000000, K_U64,
     AT(max_partitions), "partitions a queue may have (403 past it)"},
    {"QUEEN_EPHEMERAL_MAX_GROUPS", "64", 1, 4096, K_U64, AT(max_groups),
     "named groups a queue may have (403 past it)"},
    {"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S", "300", 1, 86400 * 365, K_U64,
     AT(implicit_idle_s), "an empty, unpolled implicit queue is collected"},
    {"QUEEN_EPHEMERAL_REFRESH_S", "30", 1, 86400, K_U64, AT(refresh_s),
     "how often declarations are reloaded from PostgreSQL"},
    {"QUEEN_EPHEMERAL_MEMBER_TTL_MS", "4000", 200, 600000, K_U64,
     AT(member_ttl_ms), "a cell's member unseen this long is not live"},
    {"QUEEN_EPHEMERAL_HANDOVER_TIMEOUT_MS", "5000", 100, 600000, K_U64,
     AT(handover_timeout_ms),
     "a move's hand-overs must be answered within (the rest is dropped)"},
    {"QUEEN_EPHEMERAL_HANDOVER_MAX_BYTES", "268435456", 0, UINT64_MAX >> 1,
     K_U64, AT(handover_max_bytes),
     "what one move hands over at most (the rest is dropped)"},
    {"QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS", "5000", 100, 600000, K_U64,
     AT(relay_timeout_ms),
     "a relayed request's answer deadline (a waiting pop: its timeout + 2 s)"},
    {"QUEEN_EPHEMERAL_RELAY_MAX_CONNS", "64", 1, 65536, K_U64,
     AT(relay_max_conns),
     "relayed requests in flight per peer on the short lane (pops, split "
     "acks)"},
    {"QUEEN_EPHEMERAL_RELAY_MAX_PARKED", "4096", 1, 1000000, K_U64,
     AT(relay_max_parked), "relayed waiting pops in flight per peer"},
    {"QUEEN_EPHEMERAL_RELAY_TENANT_PARKED", "1024", 1, 1000000, K_U64,
     AT(relay_tenant_parked),
     "relayed waiting pops of one tenant in flight and waiting per peer"},
    {"QUEEN_EPHEMERAL_RELAY_MAX_QUEUED", "1024", 0, 1000000, K_U64,
     AT(relay_max_queued), "relayed requests waiting per peer and lane (503)"},
    {"QUEEN_EPHEMERAL_RELAY_MAX_PEER_BYTES", "134217728", 0, UINT64_MAX >> 1,
     K_U64, AT(relay_max_peer_bytes),
     "bytes of relayed requests one peer has not answered (503 past it; 0: "
     "no bound)"},
    {"QUEEN_EPHEMERAL_RELAY_MAX_IDLE", "64", 0, 65536, K_U64,
     AT(relay_max_idle), "idle connections to a peer kept for reuse"},
    {"QUEEN_EPHEMERAL_RELAY_PIPES", "4", 1, 16, K_U64, AT(relay_pipes),
     "connections to a peer that carry pipelined pushes and acks"},
    {"QUEEN_EPHEMERAL_RELAY_IDLE_TIMEOUT_MS", "60000", 100, 86400000, K_U64,
     AT(relay_idle_timeout_ms),
     "an idle connection to a peer is closed (below IDLE_TIMEOUT_S)"},
    {"QUEEN_EPHEMERAL_RELAY_RESOLVE_TTL_MS", "30000", 0, 86400000, K_U64,
     AT(relay_resolve_ttl_ms), "a peer's advertised name is resolved again"},
    {"QUEEN_EPHEMERAL_RATE", "5000", 0, UINT32_MAX, K_U64, AT(lua.rate),
     "messages per second a tenant may push (0: no limit)"},
    {"QUEEN_EPHEMERAL_BURST", "10000", 1, UINT32_MAX, K_U64, AT(lua.burst),
     "messages a tenant may push at once (at most its bucket's depth)"},
    {"QUEEN_EPHEMERAL_TENANT_MAX_QUEUES", "100000", 0, UINT32_MAX, K_U64,
     AT(lua.tenant_max_queues),
     "queues a tenant may hold unless its grant says (0: no limit)"},
    {"QUEEN_EPHEMERAL_MAX_PARKED", "100000", 0, UINT32_MAX, K_U64,
     AT(lua.max_parked), "pops a tenant may have parked at once (0: no limit)"},
    {"QUEEN_EPHEMERAL_RETRY_AFTER_S", "30", 1, 86400, K_U64,
     AT(lua.retry_after_s), "Retry-After while the surface is paused"},
    {"QUEEN_EPHEMERAL_METER_S", "60", 1, 86400, K_U64, AT(meter_s),
     "how often the policy's meter hook sees the counters"},
    {"QUEEN_EPHEMERAL_POLICY_BUDGET_MS", "100", 10, 60000, K_U64,
     AT(policy_budget_ms), "longest a policy hook may run before it fails"},
    {"QUEEN_EPHEMERAL_POLICY_MAX_BYTES", "268435456", 0, UINT64_MAX >> 1, K_U64,
     AT(policy_max_bytes),
     "the Lua state's memory, past which policy code fails (0: no cap)"},
    {"QUEEN_TENANCY_HEADER", "false", 0, 1, K_BOOL, AT(lua.tenancy_header),
     "take the tenant from the x-queen-tenant header"},
    {"QUEEN_EPHEMERAL_REQUIRE_GRANT", "(tenancy)", 0, 1, K_BOOL,
     AT(lua.require_grant),
     "refuse tenants without a grant row (default: QUEEN_TENANCY_HEADER's)"},
    {"QUEEN_EPHEMERAL_LOG_REFUSALS", "false", 0, 1, K_BOOL,
     AT(lua.log_refusals),
     "log each refused request: tenant, route, status and code"},
    {"QUEEN_EPHEMERAL_LOG_REQUESTS", "false", 0, 1, K_BOOL,
     AT(lua.log_requests),
     "log each request the ladder decided, for `ephd policy replay`"},
    {"QUEEN_EPHEMERAL_METRICS_QUEUES", "0", 0, 1000, K_U64, AT(metrics_queues),
     "/metrics lists the depth of this many deepest queues (0: none)"},
    {"QUEEN_EPHEMERAL_LOG_DEBUG", "false", 0, 1, K_BOOL, AT(log_debug),
     "log debug events too (a refresh that changed nothing)"},
};

static int parse_value(const knob_t *k, const char *v, ephd_settings_t *s) {
  char *at = (char *)s + k->offset;
  if (k->kind == K_BOOL) {
    int b;
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
      b = 1;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
      b = 0;
    else
      return -1;
    memcpy(at, &b, sizeof(b));
    return 0;
  }
  if (*v < '0' || *v > '9') return -1;
  errno = 0;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || *end || n < k->min || n > k->max) return -1;
  uint64_t u = n;
  memcpy(at, &u, sizeof(u));
  return 0;
}

/* EPHD_ALLOWED_ORIGINS: "*", or a comma-separated list whose items are
 * "null" or http(s)://host[:port], as browsers write an Origin header. */
static int origins_usable(const char *v) {
  if (strcmp(v, "*") == 0) return 1;
  while (*v) {
    size_t n = strcspn(v, ",");
    size_t scheme = strncmp(v, "http://", 7) == 0    ? 7
                    : strncmp(v, "https://", 8) == 0 ? 8
                                                     : 0;
    int ok = (n == 4 && strncmp(v, "null", 4) == 0) || (scheme && n > scheme);
    for (size_t i = scheme; ok && i < n; i++)
      if (v[i] == '/' || v[i] <= ' ' || v[i] == 127) ok = 0;
    if (!ok) return 0;
    v += n;
    if (*v == ',' && *++v == 0) return 0;
  }
  return 1;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: ephd [--listen HOST:PORT] [--policy-dir DIR] "
          "[--database-url URL]\n"
          "            [--advertise URL] [--shadow-policy DIR]\n\n"
          "flags:\n"
          "  --listen HOST:PORT   address to serve (default 127.0.0.1:6632)\n"
          "  --policy-dir DIR     the operator's Lua policy directory\n"
          "                       (default: policies/default of this tree)\n"
          "  --database-url URL   PostgreSQL for declarations and the cell "
          "(default: $DATABASE_URL)\n"
          "  --advertise URL      http://HOST:PORT where a cell's other "
          "brokers reach\n"
          "                       this one (default: the --listen address)\n"
          "  --shadow-policy DIR  a candidate policy judged beside the live "
          "one,\n"
          "                       never answering (docs/policy.md)\n"
          "  --help               this text\n"
          "  --version            the version and FFI ABI\n\n"
          "commands (each takes --help):\n"
          "  status [--url URL] [--watch]  the tenant's queues as a table\n"
          "  push QUEUE MESSAGE...  push messages (redis-cli style)\n"
          "  pop QUEUE [--wait [S]]  pop, print, optionally wait\n"
          "  ack QUEUE ID...      settle popped messages\n"
          "  grant list|set|rm    the tenants' grants, applied at once\n"
          "  policy check DIR     load a policy directory, report, exit\n"
          "  policy test DIR      run DIR's busted specs with ephd.testing\n"
          "  policy replay --policy DIR --log FILE  what DIR would have "
          "answered\n"
          "                       the requests a broker logged\n"
          "  policy shadow [--watch]  what the shadow policy would change\n\n"
          "environment (default):\n");
  /* Not knobs, but read all the same: listed with them. */
  static const struct {
    const char *name, *fallback, *help;
  } others[] = {
      {"DATABASE_URL", "(none)", "the default of --database-url"},
      {"EPHD_URL", "(none)",
       "the commands' broker when --url is not given (then "
       "http://127.0.0.1:6632)"},
      {"EPHD_ALLOWED_ORIGINS", "(none)",
       "foreign browser origins let in: a comma-separated list, or *"},
      {"QUEEN_EPHEMERAL_CELL_TOKEN", "(none)",
       "the cell's shared secret for relayed requests (16+ characters)"},
  };
  /* Columns as wide as their longest cell, so no long name runs on. */
  int name_w = 0, fallback_w = 0;
  for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
    if ((int)strlen(knobs[i].name) > name_w) name_w = strlen(knobs[i].name);
    if ((int)strlen(knobs[i].fallback) > fallback_w)
      fallback_w = strlen(knobs[i].fallback);
  }
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
    if ((int)strlen(others[i].name) > name_w) name_w = strlen(others[i].name);
  for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
    fprintf(out, "  %-*s  %-*s  %s\n", name_w, knobs[i].name, fallback_w,
            knobs[i].fallback, knobs[i].help);
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
    fprintf(out, "  %-*s  %-*s  %s\n", name_w, others[i].name, fallback_w,
            others[i].fallback, others[i].help);
}

static int parse_listen(ephd_settings_t *s, const char *v) {
  const char *colon = strrchr(v, ':');
  if (colon == NULL || colon == v ||
      (size_t)(colon - v) >= sizeof(s->listen_host))
    return -1;
  const char *host = v, *host_end = colon;
  if (*host == '[' && host_end[-1] == ']') {
    host++;
    host_end--;
  }
  char *end;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (errno || *end || colon[1] == 0 || port < 0 || port > 65535) return -1;
  memcpy(s->listen_host, host, (size_t)(host_end - host));
  s->listen_host[host_end - host] = 0;
  s->listen_port = (int)port;
  return 0;
}

/* Every local address: the others of a cell cannot dial it. */
static int wildcard(const char *host, size_t len) {
  return len == 0 || (len == 7 && memcmp(host, "0.0.0.0", 7) == 0) ||
         (len == 2 && memcmp(host, "::", 2) == 0) ||
         (len == 4 && memcmp(host, "[::]", 4) == 0);
}

/* http://HOST:PORT, HOST a name, an IPv4 address or [an IPv6 one], and
 * nothing after the port: what the relay dials, so nothing it would have
 * to interpret. */
static int advertise_usable(const char *v) {
  size_t n = strlen(v);
  if (strncmp(v, "http://", 7) != 0 || n >= EPHD_MEMBER_ADDRESS_MAX) return 0;
  const char *host = v + 7, *colon = strrchr(host, ':');
  if (colon == NULL || colon == host || wildcard(host, (size_t)(colon - host)))
    return 0;
  int bracketed = *host == '[';
  if (bracketed != (colon[-1] == ']') ||
      (!bracketed && memchr(host, ':', (size_t)(colon - host))))
    return 0;
  for (const char *p = host; p < colon; p++)
    if (*p <= ' ' || *p == 127 || strchr("/?#@\\", *p)) return 0;
  char *end;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  return colon[1] >= '0' && colon[1] <= '9' && !errno && *end == 0 &&
         port > 0 && port <= 65535;
}

/* Printable ASCII without spaces (it travels in a header), and long enough
 * not to be guessed. */
static int token_usable(const char *v) {
  size_t n = strlen(v);
  if (n < 16 || n > 1024) return 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] <= ' ' || v[i] >= 127) return 0;
  return 1;
}

/* The default --advertise: the listen address, which a cell cannot use
 * when it is every address at once (without a database there is no cell,
 * and the address is only shown). */
static int default_advertise(ephd_settings_t *s) {
  const char *h = s->listen_host;
  if (wildcard(h, strlen(h)) && s->database_url) {
    fprintf(stderr,
            "ephd: --listen %s:%d is every address, which the other "
            "brokers of a cell cannot dial: give --advertise "
            "http://HOST:PORT\n",
            h, s->listen_port);
    return -1;
  }
  snprintf(s->advertise, sizeof(s->advertise),
           strchr(h, ':') ? "http://[%s]:%d" : "http://%s:%d", h,
           s->listen_port);
  return 0;
}

int ephd_config_load(ephd_settings_t *s, int argc, char **argv,
                     const char *default_policy_dir,
                     const char *default_lua_dir) {
  memset(s, 0, sizeof(*s));
  current = s;
  s->lua.max_pop_timeout_ms = 300000;
  s->lua.max_batch = 10000;
  s->lua.max_items = 10000;
  s->lua.max_name_bytes = 512;
  for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
    const knob_t *k = &knobs[i];
    const char *env = getenv(k->name);
    /* A default in parentheses is another knob's value, as parsed. */
    if (k->fallback[0] == '(') {
      memcpy((char *)s + k->offset, (char *)s + AT(lua.tenancy_header),
             sizeof(int));
    } else if (parse_value(k, k->fallback, s) < 0) {
      abort();
    }
    if (env && parse_value(k, env, s) < 0) {
      if (k->kind == K_BOOL)
        fprintf(stderr,
                "ephd: %s=%s is not usable: expected true, false, 1 or 0\n",
                k->name, env);
      else
        fprintf(stderr,
                "ephd: %s=%s is not usable: expected a whole number from "
                "%llu to %llu\n",
                k->name, env, (unsigned long long)k->min,
                (unsigned long long)k->max);
      return -1;
    }
  }
  /* Room for one largest request, grown by doubling, and its answer: a
   * smaller budget would close a client for a push the broker allows. */
  uint64_t one_request =
      2 * (s->max_body_bytes + s->max_header_bytes) + s->max_unwritten_bytes;
  if (s->max_client_bytes && s->max_client_bytes < one_request) {
    fprintf(stderr,
            "ephd: QUEEN_EPHEMERAL_MAX_CLIENT_BYTES=%llu is not usable: one "
            "largest request needs %llu (twice QUEEN_EPHEMERAL_MAX_BODY_BYTES "
            "and _MAX_HEADER_BYTES, and _MAX_UNWRITTEN_BYTES), or 0\n",
            (unsigned long long)s->max_client_bytes,
            (unsigned long long)one_request);
    return -1;
  }
  /* Closing idle connections is the relay's job, not its peers': a peer
   * closing one as the relay reuses it is the race peer_client.h retries. The
   * default yields to a short server idle timeout; a value given does not. */
  if (s->relay_idle_timeout_ms >= s->idle_timeout_s * 1000 &&
      getenv("QUEEN_EPHEMERAL_RELAY_IDLE_TIMEOUT_MS") == NULL)
    s->relay_idle_timeout_ms = s->idle_timeout_s * 1000 / 2;
  if (s->relay_idle_timeout_ms >= s->idle_timeout_s * 1000) {
    fprintf(stderr,
            "ephd: QUEEN_EPHEMERAL_RELAY_IDLE_TIMEOUT_MS=%llu is not usable: "
            "expected less than QUEEN_EPHEMERAL_IDLE_TIMEOUT_S (%llu ms), so "
            "the relay closes its idle connections before its peers do\n",
            (unsigned long long)s->relay_idle_timeout_ms,
            (unsigned long long)s->idle_timeout_s * 1000);
    return -1;
  }
  s->lua.allowed_origins = getenv("EPHD_ALLOWED_ORIGINS");
  if (s->lua.allowed_origins == NULL) s->lua.allowed_origins = "";
  if (!origins_usable(s->lua.allowed_origins)) {
    fprintf(stderr,
            "ephd: EPHD_ALLOWED_ORIGINS=%s is not usable: expected * or "
            "origins such as https://app.example.com:8443, comma-separated\n",
            s->lua.allowed_origins);
    return -1;
  }
  s->cell_token = getenv("QUEEN_EPHEMERAL_CELL_TOKEN");
  if (s->cell_token && *s->cell_token == 0) s->cell_token = NULL;
  if (s->cell_token && !token_usable(s->cell_token)) {
    /* The value is a secret: it is not echoed. */
    fprintf(stderr,
            "ephd: QUEEN_EPHEMERAL_CELL_TOKEN is not usable: expected 16 to "
            "1024 printable characters without spaces\n");
    return -1;
  }
  parse_listen(s, "127.0.0.1:6632");
  s->policy_dir = default_policy_dir;
  s->shadow_dir = NULL;
  s->lua_dir = default_lua_dir;
  s->database_url = getenv("DATABASE_URL");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 1;
    }
    if (strcmp(a, "--version") == 0) {
      printf("ephd 0.1.0 (ffi abi %d)\n", EPHD_FFI_ABI_VERSION);
      return 1;
    }
    const char *eq = strchr(a, '=');
    size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
    const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
    const char *flags[] = {"--listen", "--policy-dir", "--database-url",
                           "--advertise", "--shadow-policy"};
    int which = -1;
    for (int f = 0; f < 5; f++)
      if (strlen(flags[f]) == name_len && strncmp(a, flags[f], name_len) == 0)
        which = f;
    if (which < 0) {
      fprintf(stderr, "ephd: unknown flag %s (see --help)\n", a);
      return -1;
    }
    if (value == NULL || *value == 0) {
      fprintf(stderr, "ephd: %s needs a value\n", flags[which]);
      return -1;
    }
    if (!eq) i++;
    if (which == 0 && parse_listen(s, value) < 0) {
      fprintf(stderr, "ephd: --listen %s is not HOST:PORT\n", value);
      return -1;
    }
    if (which == 1) s->policy_dir = value;
    if (which == 2) s->database_url = value;
    if (which == 4) s->shadow_dir = value;
    if (which == 3) {
      if (!advertise_usable(value)) {
        fprintf(stderr,
                "ephd: --advertise %s is not http://HOST:PORT of one "
                "address\n",
                value);
        return -1;
      }
      snprintf(s->advertise, sizeof(s->advertise), "%s", value);
    }
  }
  if (s->advertise[0] == 0 && default_advertise(s) < 0) return -1;
  return 0;
}

/* The boot block: one event per effective setting, so what a broker ran
 * with is in its own log. */
void ephd_config_log(const ephd_settings_t *s) {
  char v[320];
  snprintf(v, sizeof(v), "%s:%d", s->listen_host, s->listen_port);
  ephd_log("info", "setting", "name", "listen", "value", v, NULL);
  ephd_log("info", "setting", "name", "policy_dir", "value", s->policy_dir,
           NULL);
  ephd_log("info", "setting", "name", "shadow_policy", "value",
           s->shadow_dir ? s->shadow_dir : "none", NULL);
  ephd_log("info", "setting", "name", "lua_path", "value", s->lua_dir, NULL);
  /* The URL may carry a password: say only whether there is one. */
  ephd_log("info", "setting", "name", "database", "value",
           s->database_url ? "configured" : "none", NULL);
  ephd_log("info", "setting", "name", "advertise", "value", s->advertise, NULL);
  ephd_log("info", "setting", "name", "QUEEN_EPHEMERAL_CELL_TOKEN", "value",
           s->cell_token ? "configured" : "none", NULL);
  for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
    const knob_t *k = &knobs[i];
    const char *at = (const char *)s + k->offset;
    if (k->kind == K_BOOL) {
      int b;
      memcpy(&b, at, sizeof(b));
      snprintf(v, sizeof(v), "%s", b ? "true" : "false");
    } else {
      uint64_t u;
      memcpy(&u, at, sizeof(u));
      snprintf(v, sizeof(v), "%llu", (unsigned long long)u);
    }
    ephd_log("info", "setting", "name", k->name, "value", v, NULL);
  }
  ephd_log("info", "setting", "name", "EPHD_ALLOWED_ORIGINS", "value",
           s->lua.allowed_origins, NULL);
}
