-- A per-queue rule: nobody pushes to a queue named tmp-*. Those names are
-- a client's scratch space elsewhere, and a push to one here is a mistake
-- worth refusing loudly rather than holding messages nobody will read.
-- Pops, acks and reads of tmp-* queues are served: admit sees the route.
return {
    name = "tmp-queues",
    version = 1,
    hooks = {
        -- admit(request) -> nothing to pass, or code, message: request is
        -- {route, tenant, level, queue, partition, group, messages,
        -- bytes}. Runs after identity, access and the grant, before the
        -- rate: a push refused here takes no tokens.
        admit = function(request)
            if request.route == "push" and request.queue
               and request.queue:find("^tmp%-") then
                return "ephemeral_quota_exceeded",
                       "queues named tmp-* take no pushes on this broker"
            end
        end,
    },
}
