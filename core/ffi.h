/* THE narrow boundary between the C core and the broker's Lua: every type and
 * function Lua may touch, in plain C that LuaJIT's ffi.cdef parses. The build
 * turns this file (minus its preprocessor lines) into the Lua module
 * ephd.abi, so the header and lua/ephd/core.lua cannot drift. Rules: no
 * function-like macros, no callbacks into Lua.
 *
 * Every function here is named ephd_ffi_* (as OpenResty marks its
 * ngx_http_lua_ffi_*), so an entry point is known at its definition: C
 * that calls one calls the ABI. One return convention: a function that can
 * fail returns an int, EPHD_OK (or, where its comment says so, a count or
 * a length >= 0) or a negative EPHD_E_* code, with details in the
 * request's operation or a caller-provided struct; EPHD_PARKED, EPHD_HELD
 * and EPHD_RELAYED say C answers the request (later, or already). A function
 * that cannot fail returns its value, or nothing. */
#ifndef EPHD_FFI_H
#define EPHD_FFI_H
#include <stddef.h>
#include <stdint.h>
#pragma GCC visibility push(default)

enum { EPHD_FFI_ABI_VERSION = 31 };

enum {
  EPHD_OK = 0,
  EPHD_PARKED = 1,  /* a pop parked on its gate; C answers later */
  EPHD_HELD = 2,    /* held for a database write or a reload; C answers later */
  EPHD_RELAYED = 3, /* another member owns it: relayed, or owner_moved */
  EPHD_E_BAD_REQUEST = -1, /* the scan struct's message says why */
  EPHD_E_REFUSED = -2,     /* see the refusals bitmask */
  EPHD_E_NOT_FOUND = -3,
  EPHD_E_UNAVAILABLE = -4, /* no database connection for a declaration */
  EPHD_E_NOT_ALLOWED = -5, /* a known path, not with this method */
  /* The commit would create an implicit queue, whose options the policy
   * gives (ephd_ffi_queue_options): nothing was done; Lua fills
   * req->op->created and commits again. */
  EPHD_E_NEW_QUEUE = -6
};

/* Budgets a push would break; C reports every one of them and
 * the Lua ladder picks the outermost, so the order is data in one place. */
enum {
  EPHD_REFUSE_QUEUE_FULL = 1,
  EPHD_REFUSE_CELL_BYTES = 2,
  EPHD_REFUSE_TENANT_BYTES = 4,
  EPHD_REFUSE_TENANT_QUEUES = 8,
  EPHD_REFUSE_PARKED = 16,
  EPHD_REFUSE_QUEUE_PARTS = 32,     /* partitions past a queue's cap */
  EPHD_REFUSE_QUEUE_TOO_SMALL = 64, /* the push alone is over its bounds */
  EPHD_REFUSE_QUEUE_GROUPS = 128,   /* named groups past a queue's cap */
  /* dropOldest could not make room: the queue is full of other partitions'
   * messages, and a push evicts from its own partition only */
  EPHD_REFUSE_QUEUE_CROWDED = 256
};

typedef struct {
  const char *ptr;
  size_t len;
} ephd_slice_t;

typedef struct ephd_op ephd_op_t;

/* One HTTP request, pointing into C buffers that live until it is answered. */
typedef struct {
  ephd_slice_t method;
  ephd_slice_t path; /* raw, without the query */
  ephd_slice_t query;
  ephd_slice_t body;
  ephd_slice_t tenant;        /* x-queen-tenant header, empty when absent */
  ephd_slice_t authorization; /* Authorization header, empty when absent */
  /* What the browser checks read (lua/ephd/browser.lua); empty when absent */
  ephd_slice_t content_type;
  ephd_slice_t origin;
  ephd_slice_t host;
  ephd_slice_t fetch_site; /* Sec-Fetch-Site */
  /* Content-Type is exactly application/json, the usual case, which the
   * browser check takes without reading the header */
  int json;
  ephd_slice_t forward; /* X-Queen-Forward: the mark (core/cell/mark.h) */
  ephd_slice_t session; /* X-Queen-Session: a peer session's opening */
  ephd_op_t *op;        /* what its parse hands its commit (below) */
} ephd_request_t;

/* A queue's options in force (after Lua clamps a declaration). */
typedef struct {
  uint64_t max_bytes;  /* the queue's, over its partitions on this broker */
  uint64_t max_length; /* the same */
  int drop_oldest;
  uint64_t ttl_s; /* 0: off */
  uint64_t lease_s;
  uint64_t retry_limit; /* deliveries per group; 0 behaves as 1 */
  uint64_t window_ms;   /* windowBuffer; window_count 0: off */
  uint64_t window_count;
} ephd_options_t;

/* The broker's knobs as Lua needs them. */
typedef struct {
  uint64_t pop_timeout_ms;
  uint64_t max_pop_timeout_ms;
  uint32_t max_batch;
  uint32_t max_items;
  uint32_t max_name_bytes;
  int tenancy_header;
  int require_grant;
  ephd_options_t defaults; /* what an implicit queue runs with */
  uint64_t max_cell_bytes;
  uint64_t rate;          /* messages per second per tenant; 0: no limit */
  uint64_t burst;         /* the bucket's depth */
  uint64_t max_parked;    /* parked pops per tenant; 0: no limit */
  uint64_t retry_after_s; /* Retry-After of a paused surface */
  /* queues a tenant may hold unless its grant says; 0: no limit */
  uint64_t tenant_max_queues;
  /* EPHD_ALLOWED_ORIGINS: "" (none), "*", or origins joined by commas */
  const char *allowed_origins;
  int log_refusals; /* a log line per refused request (ephd.requestlog) */
  int log_requests; /* a log line per request the ladder decided (same) */
} ephd_config_t;

/* A tenant's allowances, decided by policy; 0 is no limit. */
typedef struct {
  uint64_t max_bytes;
  uint64_t max_queues;
  uint64_t max_parked; /* pops parked at once */
} ephd_tenant_limits_t;

/* What a tenant holds and has done, for policy and metering. A tenant with
 * no queue for the implicit idle time (at least the meter's interval) is
 * forgotten; seen again, its counters start from zero under a new born. */
typedef struct {
  uint64_t bytes; /* its footprint: payload, per-message overhead, names */
  uint64_t queues;
  uint64_t parked;
  uint64_t pushed;    /* messages, item by item */
  uint64_t delivered; /* deliveries, redeliveries included */
  /* Drops by cause, kept when the queue that dropped is collected. */
  uint64_t dropped_bounds;
  uint64_t dropped_ttl;
  uint64_t dropped_retry;
  uint64_t born; /* which record of this tenant these counters belong to */
} ephd_tenant_stats_t;

/* One stored grant (queen.ephemeral_quota); -1 is SQL NULL. */
typedef struct {
  ephd_slice_t tenant;
  int enabled;
  int64_t max_bytes;
  int64_t max_queues;
  int64_t max_msgs_per_sec;
} ephd_grant_row_t;

/* One stored declaration, as loaded from PostgreSQL. */
typedef struct {
  ephd_slice_t tenant;
  ephd_slice_t queue;
  ephd_slice_t options; /* jsonb as text */
} ephd_decl_row_t;

/* A push or an ack body as C scanned it: the names decoded, the items
 * (messages or acks) counted and kept in the request's operation. */
typedef struct {
  ephd_slice_t queue;     /* decoded; empty when absent */
  ephd_slice_t partition; /* a push's, decoded; "Default" when absent */
  ephd_slice_t group;     /* an ack's, decoded; empty when absent or null */
  int has_queue;
  int has_partition;
  int has_group;
  /* A push's queue and partition both pass every check Lua's
   * validate.name makes (present, at most max_name_bytes, no control
   * character, UTF-8): Lua skips them. 0: Lua checks and says why. */
  int names_clean;
  uint32_t count;    /* messages or acks */
  uint64_t bytes;    /* a push's payload bytes */
  char message[200]; /* why a body is a 400 */
} ephd_scan_t;

typedef struct {
  const char *tenant;
  size_t tenant_len;
  const char *queue;
  size_t queue_len;
  const char *partition; /* NULL: every partition */
  size_t partition_len;
  const char *group; /* NULL: queue mode */
  size_t group_len;
  uint32_t batch;
  uint64_t timeout_ms;
  int wait;
  int auto_ack;
  int timeout_given; /* the query named its timeout (else the default's) */
  /* A member's whole-queue pop asks whether anything is here to take
   * (core/cell/whole_pop.h): answered "ready" when there is, or once a
   * push makes it so, taking nothing. Read from a marked request only. */
  int notify;
  const ephd_tenant_limits_t *limits;
} ephd_pop_args_t;

/* A request's operation: what its parse hands its commit. Each request in
 * flight has its own (req->op, ctx.op in Lua), valid until it is answered,
 * so requests held or parked at once share none of it. */
struct ephd_op {
  union {
    ephd_scan_t scan;       /* push, ack: filled by the scan */
    ephd_pop_args_t pop;    /* pop: filled by Lua */
    ephd_options_t options; /* configure: the declaration in force, by Lua */
  };
  uint32_t refusals; /* out: the budgets a commit would break */
  /* in: the options of the implicit queue a push or pop creates, when
   * has_created (set by Lua after EPHD_E_NEW_QUEUE; 0 at dispatch) */
  ephd_options_t created;
  int has_created;
};

int ephd_ffi_abi_version(void);
/* Where the request being dispatched is: Lua reads the slot's address once
 * and the request from it per call, because converting a lightuserdata
 * argument (ffi.cast) is not compiled by LuaJIT. */
const ephd_request_t *const *ephd_ffi_request_slot(void);
const ephd_config_t *ephd_ffi_config(void);

/* Writes a whole response for req; Lua uses it for small bodies.
 * extra_headers is NULL or complete "Name: value\r\n" lines. */
void ephd_ffi_respond(const ephd_request_t *req, int status,
                      const char *extra_headers, const char *body, size_t len);
/* The same for an error answer: body is its {"error", "code"} text, code
 * its place in lua/ephd/codes.lua's list (from 0), counted by /metrics. */
void ephd_ffi_refuse(const ephd_request_t *req, int code, int status,
                     const char *extra_headers, const char *body, size_t len);
/* The same with another media type than JSON (the dashboard's page). */
void ephd_ffi_respond_as(const ephd_request_t *req, int status,
                         const char *content_type, const char *body,
                         size_t len);

/* Percent-decodes once (and '+' as a space in a query); returns the decoded
 * length, or EPHD_E_BAD_REQUEST on a bad escape. out must hold len bytes. */
long ephd_ffi_url_decode(const char *in, size_t len, char *out,
                         int plus_is_space);

/* Whether s is strict UTF-8 (RFC 3629: no overlong form, no surrogate,
 * nothing above U+10FFFF, no truncated sequence): EPHD_OK, or
 * EPHD_E_BAD_REQUEST. The JSON scanner
 * checks every string it walks; this is for names that were percent-decoded
 * instead. */
int ephd_ffi_utf8_valid(const char *s, size_t len);
/* A tenant id (a UUID, its hex digits in either case) written lowercase
 * into out (36 bytes): EPHD_OK, or EPHD_E_BAD_REQUEST when it is not one
 * (core/uuid.h). */
int ephd_ffi_uuid_lower(const char *p, size_t len, char *out);

/* The raw text of a top-level member of a JSON object (the last one when
 * repeated): EPHD_OK, EPHD_E_NOT_FOUND (absent) or EPHD_E_BAD_REQUEST (not
 * a JSON object). Lets Lua check a
 * value's JSON type where lua-cjson decodes [] and {} alike. */
int ephd_ffi_json_field(const char *json, size_t len, const char *name,
                        ephd_slice_t *value);
/* How many members a JSON object has, repeated keys counted each time, or
 * EPHD_E_BAD_REQUEST when it is not one: lua-cjson keeps the last of a repeated
 * key, and a repeated key must be refused, not silently dropped. */
int ephd_ffi_json_members(const char *json, size_t len);

/* push: scan the body into req->op (validating every payload without
 * decoding it), let Lua check names and policy, then commit all or nothing
 * here: EPHD_OK once req is answered 201 {"pushed":N}, or EPHD_E_REFUSED
 * with req->op->refusals and req unanswered. */
int ephd_ffi_push_scan(const ephd_request_t *req);
int ephd_ffi_push_commit(const ephd_request_t *req, const char *tenant,
                         size_t tenant_len, const ephd_tenant_limits_t *limits);

/* The cell's routing, decided once per request (core/cell/routing.h): the
 * verbs whose handler is routed ask, after the ladder and before their
 * commit, whether this broker serves the request. EPHD_OK: commit here.
 * EPHD_RELAYED: C has answered or held it (relayed to the member holding
 * what it names, or, marked already, refused owner_moved), and the commit
 * does not run. taken: what the rate was charged for a push, given back
 * (the dispatch module's refund) when its owner refuses it, as Lua gives
 * it back when a rung here refuses one. Asked only in a cell (see
 * ephd_ffi_cell_size) or for a marked request. */
typedef enum {
  EPHD_CELL_PUSH,
  EPHD_CELL_POP,
  EPHD_CELL_ACK,
  EPHD_CELL_VERBS
} ephd_cell_verb_t;
int ephd_ffi_cell_route(const ephd_request_t *req, ephd_cell_verb_t verb,
                        const char *tenant, size_t tenant_len, uint32_t taken);
/* Where the count of members in this broker's view lives (1: a cell of
 * one), read by the ladder before a routed commit without a call, so a
 * broker alone pays nothing for routing. */
const uint32_t *ephd_ffi_cell_size(void);

/* A request marked as relayed by a member of the cell (req->forward):
 * EPHD_OK and the tenant the edge established, when it came on a member's
 * connection (its session opened with this broker's cell token, by this
 * request's req->session or an earlier one's: core/cell/mark.h) and its
 * tenant is in the form the edge writes it (a lowercase UUID);
 * EPHD_E_BAD_REQUEST for another tenant; EPHD_E_REFUSED otherwise, and
 * always at a broker without a token. */
int ephd_ffi_forward_tenant(const ephd_request_t *req, ephd_slice_t *tenant);

/* A partition handed over by its old owner (core/cell/transfer.h), sent with a
 * trusted forward mark: check reads the body (EPHD_E_BAD_REQUEST with
 * req->op->scan.message when it is not a transfer); commit merges it into
 * this broker's ring, charged like a push against the queue's bounds and
 * the budgets: EPHD_OK once req is answered 200 {"accepted":N}, or
 * EPHD_E_REFUSED with req->op->refusals and req unanswered. */
int ephd_ffi_transfer_check(const ephd_request_t *req);
int ephd_ffi_transfer_commit(const ephd_request_t *req, const char *tenant,
                             size_t tenant_len,
                             const ephd_tenant_limits_t *limits);

/* asked: whether the policy in force has a queue_options hook. While it
 * has, a push or pop that would create an implicit queue returns
 * EPHD_E_NEW_QUEUE first, once, so the hook runs per queue created and
 * never per message; while it has not, such a queue takes the broker's
 * defaults with no question asked. */
void ephd_ffi_queue_options(int asked);

/* pop, with req->op->pop: answers req itself (200, EPHD_OK), parks it
 * (EPHD_PARKED), or is refused (EPHD_E_REFUSED, req->op->refusals) for
 * creating a queue past the tenant's allowance or parking past its parked
 * slots. */
int ephd_ffi_pop(const ephd_request_t *req);

/* ack: scan into req->op, then settle every id here and answer req with
 * the results. */
int ephd_ffi_ack_scan(const ephd_request_t *req);
int ephd_ffi_ack_commit(const ephd_request_t *req, const char *tenant,
                        size_t tenant_len);

/* reset drops contents and keeps the queue and its declaration. */
uint64_t ephd_ffi_reset(const char *tenant, size_t tenant_len,
                        const char *queue, size_t queue_len);
/* After a reset applied here, in a cell: the same request sent with the
 * forward mark to every other live member (core/cell/fanout.h), and req held
 * and answered 200 with answer (what this broker dropped) once they have
 * answered: EPHD_HELD. EPHD_OK when there is nobody to send it to (a cell
 * of one, no cell token, or req is marked: a fan-out already), and Lua
 * answers. */
int ephd_ffi_reset_fanout(const ephd_request_t *req, const char *tenant,
                          size_t tenant_len, const char *answer,
                          size_t answer_len);

/* configure writes the declaration (the raw body's options) to PostgreSQL,
 * then applies req->op->options to memory and answers 201; delete removes
 * the declaration, then the queue, and answers. Both hold req while the
 * write runs, and return EPHD_E_UNAVAILABLE without answering when no
 * database connection is available; a configure past an allowance is
 * EPHD_E_REFUSED (req->op->refusals). */
int ephd_ffi_configure(const ephd_request_t *req, const char *tenant,
                       size_t tenant_len, const char *queue, size_t queue_len,
                       const ephd_tenant_limits_t *limits);
int ephd_ffi_delete(const ephd_request_t *req, const char *tenant,
                    size_t tenant_len, const char *queue, size_t queue_len);

/* Grant writes (POST and DELETE /api/v1/system/grants): the row written to
 * queen.ephemeral_quota (row's -1 fields as SQL NULL), then every grant
 * read back and applied (Lua's apply_grants) before req is answered, so a
 * grant holds from its answer on. Like configure: held, or
 * EPHD_E_UNAVAILABLE without answering when no database connection is
 * available. */
int ephd_ffi_grant_set(const ephd_request_t *req, const ephd_grant_row_t *row);
int ephd_ffi_grant_delete(const ephd_request_t *req, const char *tenant,
                          size_t tenant_len);

/* The declaration store's state, for readiness: no database configured,
 * connected, or configured and unreachable right now. */
enum {
  EPHD_DATABASE_NONE = 0,
  EPHD_DATABASE_CONNECTED = 1,
  EPHD_DATABASE_UNAVAILABLE = 2
};
int ephd_ffi_database_state(void);

/* Loading declarations: while Lua's apply_declarations runs, the rows of
 * the load are readable here, and each valid one is applied with
 * ephd_ffi_declare (queues not applied in a load lose their declaration). */
uint32_t ephd_ffi_store_rows(void);
int ephd_ffi_store_row(uint32_t i, ephd_decl_row_t *row);
int ephd_ffi_store_grant(uint32_t i, ephd_grant_row_t *row);
void ephd_ffi_declare(const char *tenant, size_t tenant_len, const char *queue,
                      size_t queue_len, const ephd_options_t *opts);

/* Tenants' holdings and counters: one tenant, or every tenant in turn
 * (*pos starts at 0); EPHD_E_NOT_FOUND for an unknown tenant, or when every
 * tenant was given. */
int ephd_ffi_tenant_stats(const char *tenant, size_t tenant_len,
                          ephd_tenant_stats_t *out);
int ephd_ffi_tenant_next(size_t *pos, ephd_slice_t *tenant,
                         ephd_tenant_stats_t *out);

/* Clocks: the loop's monotonic milliseconds (rate buckets) and wall-clock
 * seconds (policies such as quiet hours). */
uint64_t ephd_ffi_now_ms(void);
double ephd_ffi_wall_time(void);

/* Brackets every call into policy code: a hook still running when its time
 * budget is spent is interrupted (policy code runs interpreted, so the
 * interrupt, a debug hook, is seen) and fails like a raising hook.
 * candidate: the code is a shadow policy's, whose allocations may take the
 * state to three quarters of QUEEN_EPHEMERAL_POLICY_MAX_BYTES only: the
 * last quarter is the live policy's, which a candidate must never starve
 * (its failure disables the shadow, the live one's answers 503). */
void ephd_ffi_policy_enter(int candidate);
void ephd_ffi_policy_leave(void);

/* One logfmt line: Lua formats its fields (ephd.log), C adds ts, level
 * and event, so every line of the log has one shape. */
void ephd_ffi_log_fields(const char *level, const char *event,
                         const char *fields);

/* Re-reads the policy directories off the loop and swaps the policy in if
 * it loads; req (held meanwhile, EPHD_HELD) is answered with the outcome. */
int ephd_ffi_policy_reload(const ephd_request_t *req);
/* Reads the candidate policy in dir (an absolute path, len bytes) off the
 * loop as a reload reads, and hands it to ephd.host.shadow to judge
 * beside the live policy (ephd.shadow); req (held, EPHD_HELD) is answered
 * with the outcome. EPHD_E_UNAVAILABLE, req unanswered, while another load
 * or reload runs. */
int ephd_ffi_policy_shadow(const ephd_request_t *req, const char *dir,
                           size_t len);
/* The shadow is gone (removed, or promoted: see below): its directory is no
 * longer the budget's to watch. EPHD_OK. */
int ephd_ffi_policy_shadow_drop(void);
/* The shadow's directory becomes the live policy's, which a later reload
 * (SIGHUP, POST /api/v1/system/policy/reload) reads: EPHD_OK, or
 * EPHD_E_NOT_FOUND when no shadow is loaded, EPHD_E_UNAVAILABLE while a
 * load or reload runs (it would apply after, over the promotion). Lua swaps
 * the policy in only on EPHD_OK. */
int ephd_ffi_policy_promote(void);

/* Routes: lua/ephd/routes.lua is the table; its rows are given to the
 * matcher once, route i + 1 being rows[i]. path is exact, or holds one
 * parameter segment ("/:queue") that matches any bytes of a request's path,
 * none and '/' included (a malformed name is its handler's 400, not a 404).
 * head: this GET route answers HEAD too. Returns EPHD_OK, or
 * EPHD_E_BAD_REQUEST for a table the matcher cannot take (the one in force
 * stays). */
enum { EPHD_ROUTES_MAX = 32 };
typedef struct {
  const char *method;
  const char *path;
  int head;
} ephd_route_row_t;
typedef struct {
  int route;          /* the route; a route of the path on NOT_ALLOWED */
  ephd_slice_t param; /* the parameter segment, raw; empty when none */
} ephd_route_match_t;
int ephd_ffi_routes_define(const ephd_route_row_t *rows, int n);
/* The route of req's method and path, without allocating: EPHD_OK,
 * EPHD_E_NOT_FOUND (no such path) or EPHD_E_NOT_ALLOWED (not this method;
 * match->route names the path for its Allow list). */
int ephd_ffi_route(const ephd_request_t *req, ephd_route_match_t *match);

/* Metrics: Lua names the routes once (1..EPHD_ROUTES_MAX) and tags each
 * request with its route; C counts every answer, and writes GET /metrics
 * whole: its own families, then those only Lua counts (the policy's hooks
 * and reloads, the shadow's decisions), from the samples Lua hands it. C
 * spells every family (core/metrics.c: name, HELP, TYPE, label names) and
 * every line (core/prom.c); Lua gives only label values and numbers. */
enum {
  EPHD_METRIC_HOOK_FAILURES = 0,    /* {hook} */
  EPHD_METRIC_POLICY_RELOADS = 1,   /* {outcome} */
  EPHD_METRIC_POLICY_VERSION = 2,   /* {name} */
  EPHD_METRIC_SHADOW_DECISIONS = 3, /* {live, shadow} */
  EPHD_METRIC_SHADOW_DISABLED = 4,  /* no label */
  EPHD_METRIC_FAMILIES = 5
};
typedef struct {
  int family;            /* EPHD_METRIC_* */
  ephd_slice_t label[2]; /* the family's label values, in its order */
  double value;
} ephd_metric_t;
void ephd_ffi_metrics_route(int idx, const char *name);
void ephd_ffi_request_route(const ephd_request_t *req, int idx);
/* samples: n of them, each family's in the order they are written. */
void ephd_ffi_metrics(const ephd_request_t *req, const ephd_metric_t *samples,
                      int n);

/* The two status reads: C writes the body (the queue list can be long). */
void ephd_ffi_queues(const ephd_request_t *req, const char *tenant,
                     size_t tenant_len);
int ephd_ffi_depth(const ephd_request_t *req, const char *tenant,
                   size_t tenant_len, const char *queue, size_t queue_len,
                   const char *group, size_t group_len);

/* The cell as this broker sees it (GET /api/v1/system/cell): its members,
 * sorted by id, as the last heartbeat's read had them (core/cell/members.h). */
typedef struct {
  uint32_t members; /* rows: the live, and the unseen not yet collected */
  uint32_t live;
  uint32_t self;   /* this broker's row */
  int database;    /* 0: none, so a cell of one for good */
  int fresh;       /* read within the TTL; always, without a database */
  uint64_t ttl_ms; /* this broker's: its view is stale past it */
  uint64_t partitions_held;  /* of the queues this broker holds */
  uint64_t partitions_owned; /* of those, the ones placement gives it */
  uint64_t version;          /* the view's: a hash of its members, in order */
} ephd_cell_t;
typedef struct {
  char id[17]; /* 16 hex digits */
  ephd_slice_t address;
  uint32_t epoch;
  int live;        /* in the view: live by its own TTL at the last read, its
                    * listener answered as it (ready), and not leaving */
  uint64_t ttl_ms; /* the TTL it beats for */
  uint64_t seen_ms_ago; /* by the database's clock, plus the time since */
} ephd_cell_member_t;
/* partitions: whether to count partitions_held and _owned, a walk over
 * every partition held (0 leaves them 0: the placement view's read). */
void ephd_ffi_cell(ephd_cell_t *cell, int partitions);
/* Row i; the address lives until the next read is applied. */
int ephd_ffi_cell_member(uint32_t i, ephd_cell_member_t *member);
/* GET /api/v1/ephemeral/ready, a member asking whether this broker's
 * listener is up (core/cell/members.c): writes {"id","epoch","ready"} into out
 * (cap >= 96) and returns the status, 200, or 503 once it stops. */
int ephd_ffi_cell_ready(char *out, size_t cap);
/* POST /api/v1/ephemeral/leaving, a member saying it stops: EPHD_OK with
 * this broker's answer in out (cap >= 64); EPHD_E_REFUSED without a
 * trusted forward mark; EPHD_E_BAD_REQUEST for a body that is not
 * {"id","epoch"} as a member writes it. */
int ephd_ffi_cell_leaving(const ephd_request_t *req, char *out, size_t cap);

#pragma GCC visibility pop
#endif
