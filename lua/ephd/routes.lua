-- The route table: one row per route, and the one place a route is named.
-- The matcher (core/routes.c, given the rows by ephd.router), the access
-- check, the metrics' route labels and dispatch all read it; adding a route
-- is a row here plus its handler.
--
-- name     the metrics' route label, and request.route for policy hooks
-- method   GET routes answer HEAD too (C drops the body), unless head = false
-- path     exact, or one ":queue" segment, handed to the handler raw (still
--          percent-encoded), empty or holding '/' included: a malformed
--          name is its handler's 400, since a 404 says there is no route
-- level    the access level it needs (ephd.access)
-- class    "family": the kill switch pauses it and a grant gates it;
--          "system": neither (or nobody could unpause); "open": answered
--          before the ladder, with no identity
-- handler  a module of ephd.handlers (parse and commit), or module.field;
--          an open route's handler is a function of the request
--
-- The rows' order is the routes' ids, and so the order of /metrics.
return {
    { name = "push", method = "POST", path = "/api/v1/ephemeral/push",
      level = "write-only", class = "family", handler = "push" },
    -- A pop takes messages, and a HEAD must change nothing (RFC 9110
    -- 9.3.2).
    { name = "pop", method = "GET", path = "/api/v1/ephemeral/pop",
      level = "read-write", class = "family", handler = "pop", head = false },
    { name = "ack", method = "POST", path = "/api/v1/ephemeral/ack",
      level = "read-write", class = "family", handler = "ack" },
    -- A partition handed over by its old owner (docs/cell.md, "Moves"):
    -- only with a trusted forward mark, which carries the tenant.
    { name = "handover", method = "POST", path = "/api/v1/ephemeral/handover",
      level = "read-write", class = "family", handler = "handover" },
    { name = "configure", method = "POST", path = "/api/v1/ephemeral/configure",
      level = "read-write", class = "family", handler = "configure" },
    { name = "reset", method = "POST", path = "/api/v1/ephemeral/reset",
      level = "read-write", class = "family", handler = "reset" },
    { name = "delete", method = "DELETE",
      path = "/api/v1/ephemeral/queue/:queue",
      level = "read-write", class = "family", handler = "delete" },
    { name = "queues", method = "GET", path = "/api/v1/ephemeral/queues",
      level = "read-only", class = "family", handler = "queues.family" },
    { name = "depth", method = "GET",
      path = "/api/v1/ephemeral/queues/:queue/depth",
      level = "read-only", class = "family", handler = "depth" },
    -- The cell's placement view, for a client that routes each request
    -- to its owner (docs/cell.md, "Routing to the owner"): any identity
    -- may read it, since a producer or a consumer routes by it; it tells
    -- the members' ids, addresses and epochs, which are no secret.
    { name = "cell_view", method = "GET", path = "/api/v1/ephemeral/cell",
      level = "any", class = "family", handler = "cell.placement" },
    { name = "system_status", method = "GET", path = "/api/v1/system/ephemeral",
      level = "admin", class = "system", handler = "surface.status" },
    { name = "system_switch", method = "POST",
      path = "/api/v1/system/ephemeral",
      level = "admin", class = "system", handler = "surface.switch" },
    { name = "policy_reload", method = "POST",
      path = "/api/v1/system/policy/reload",
      level = "admin", class = "system", handler = "reload" },
    -- A candidate policy judged beside the live one, and its promotion
    -- (docs/policy.md, "Changing policy safely").
    { name = "policy_shadow", method = "GET",
      path = "/api/v1/system/policy/shadow",
      level = "admin", class = "system", handler = "shadow.show" },
    { name = "policy_shadow_load", method = "POST",
      path = "/api/v1/system/policy/shadow",
      level = "admin", class = "system", handler = "shadow.load" },
    { name = "policy_shadow_delete", method = "DELETE",
      path = "/api/v1/system/policy/shadow",
      level = "admin", class = "system", handler = "shadow.remove" },
    { name = "policy_promote", method = "POST",
      path = "/api/v1/system/policy/promote",
      level = "admin", class = "system", handler = "shadow.promote" },
    { name = "metering", method = "GET", path = "/api/v1/system/metering",
      level = "admin", class = "system", handler = "metering" },
    { name = "cell", method = "GET", path = "/api/v1/system/cell",
      level = "admin", class = "system", handler = "cell.view" },
    -- A tenant's listing for the operator, paused or not (ephd status).
    { name = "system_queues", method = "GET", path = "/api/v1/system/queues",
      level = "admin", class = "system", handler = "queues.system" },
    -- Grants (queen.ephemeral_quota): read from memory, written through
    -- the store and applied before the answer.
    { name = "grants", method = "GET", path = "/api/v1/system/grants",
      level = "admin", class = "system", handler = "grants.list" },
    { name = "grant_set", method = "POST", path = "/api/v1/system/grants",
      level = "admin", class = "system", handler = "grants.set" },
    { name = "grant_delete", method = "DELETE",
      path = "/api/v1/system/grants/:tenant",
      level = "admin", class = "system", handler = "grants.delete" },
    { name = "metrics", method = "GET", path = "/metrics",
      level = "admin", class = "system", handler = "metrics" },
    -- A load balancer probes without credentials, and a paused surface is
    -- still alive.
    { name = "health", method = "GET", path = "/health",
      class = "open", handler = "probes.health" },
    { name = "ready", method = "GET", path = "/ready",
      class = "open", handler = "probes.ready" },
    -- Between the cell's members (docs/cell.md, "Membership"): whether a
    -- broker's listener is up, as which member (harmless: its id and
    -- epoch); and a member saying it stops, only with a trusted forward
    -- mark (C checks it).
    { name = "cell_ready", method = "GET", path = "/api/v1/ephemeral/ready",
      class = "open", handler = "cell.ready" },
    { name = "cell_leaving", method = "POST",
      path = "/api/v1/ephemeral/leaving",
      class = "open", handler = "cell.leaving" },
    -- The page holds no data: what it shows, it fetches with the viewer's
    -- identity.
    { name = "dashboard", method = "GET", path = "/dashboard",
      class = "open", handler = "dashboard" },
}
