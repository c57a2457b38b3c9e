-- A policy with a say at every rung that is a policy's, for specs that run
-- it as its own shadow (spec/ephd/decision_spec.lua, spec/e2e/
-- self_shadow_spec.lua): paused for one credential, identities by
-- credential (an operator, a reader, one refused), limits from the grant
-- with a byte allowance, admit by queue and group (its refusals' words
-- start "admit:"), and a cost that weighs queues named heavy-*.
return {
    name = "every-rung",
    version = 1,
    hooks = {
        paused = function(request)
            if request.authorization == "Bearer paused" then
                return 30, "paused for this credential"
            end
        end,

        authenticate = function(request)
            local a = request.authorization
            if a == "Bearer operator" then
                return { tenant = request.tenant, level = "admin" }
            elseif a == "Bearer reader" then
                return { tenant = request.tenant, level = "read-only" }
            elseif a == "Bearer refused" then
                return "forbidden", "this credential is refused"
            end
        end,

        limits = function(_, grant, defaults)
            local rate = grant and grant.max_msgs_per_sec or defaults.rate
            return { rate = rate, burst = rate,
                     max_bytes = grant and grant.max_bytes,
                     max_queues = grant and grant.max_queues or 20 }
        end,

        admit = function(request)
            local q = request.queue or ""
            if request.route == "push" and q:find("^tmp%-") then
                return "ephemeral_quota_exceeded",
                       "admit: no pushes to tmp-* queues"
            elseif q:find("^slow%-") then
                return "rate_limited", "admit: slow-* queues wait", 3
            elseif request.group == "closed" then
                return "forbidden", "admit: the group closed is closed"
            end
        end,

        cost = function(push)
            if push.queue:find("^heavy%-") then return push.messages * 10 end
            return push.messages
        end,
    },
}
