-- The default policy: a self-hosted broker with neither gate closed. Every
-- hook here is also the fallback for a policy directory that does not
-- define it. Copy this directory and point --policy-dir at the copy.
--
-- Four hooks are left out, so that no policy runs for them at all (the
-- broker then builds nothing for them either):
--
-- paused(request) -> nothing, or retry_after_seconds, reason to answer 503
-- ephemeral_disabled. Runs first, for family routes. Left out: never
-- paused but by the kill switch.
--
-- authenticate(request) -> nothing to accept request.tenant at the broker's
-- level for it (read-write when the tenant came from an x-queen-tenant
-- header, admin for the single tenant otherwise); {tenant = uuid, level =
-- level} to accept as that identity, the only way to admin under tenancy
-- headers; or code, reason to refuse (unauthorized, forbidden or a code of
-- the taxonomy). Left out: the broker's identity, as for nothing returned.
--
-- admit(request) -> nothing, or code, message[, retry_after_seconds] to
-- refuse a request by its route, identity and names (request: {route,
-- tenant, level, queue, partition, group, messages, bytes}); code one of
-- ephemeral_quota_exceeded, queue_full, rate_limited (with the seconds),
-- ephemeral_bad_request, forbidden. Left out: no admission rung at all.
--
-- queue_options(tenant, queue) -> nothing, or the options configure takes,
-- for an implicit queue a push or pop creates. Left out: the broker's
-- defaults, with no question asked.
return {
    name = "default",
    version = 1,
    hooks = {
        -- limits(tenant, grant, defaults) -> {rate, burst, max_bytes,
        -- max_queues, max_parked}, integers; nil fields are no limit (rate:
        -- none; burst: the rate). Asked when a tenant is first seen, again
        -- after a reload, a grants refresh or a while idle.
        limits = function(tenant, grant, defaults)
            local granted_rate = grant and grant.max_msgs_per_sec
            return {
                -- A grant's rate is its burst too (Queen: rate = burst):
                -- a tenant granted 5/s pushes 5 at once, not 10,000.
                rate = granted_rate or defaults.rate,
                burst = granted_rate or defaults.burst,
                max_bytes = grant and grant.max_bytes,
                max_queues = grant and grant.max_queues
                             or defaults.max_queues,
                max_parked = defaults.max_parked,
            }
        end,

        -- cost(push) -> tokens this push takes from the tenant's bucket.
        -- push: {tenant, queue, partition, messages, bytes}. While this
        -- one is in force the broker takes the count without calling it
        -- (lua/ephd/policy.lua, messages_cost): change both together.
        cost = function(push)
            return push.messages
        end,
    },
}
