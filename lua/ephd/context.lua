-- The request context: its parts, the one module that writes each, and a
-- context made from them. One is made when ephd.dispatch loads and
-- refilled for every request (and one per shadow's or replay's judge,
-- ephd.verdict): every field is there from the start, so filling one
-- never grows the table; building the context per request, and rehashing
-- it as it grew, had been a tenth of a push.
--
-- Its fields are in parts, each written by one module, as Kong gives each
-- plugin its own namespace of the context: a reader knows where a field
-- came from, and no module changes what another decided.
--
--   routed    what the router set (ephd.dispatch): req, the route's row,
--             its raw :param, its handler, whether it is the family's,
--             whether a member relayed it (forwarded)
--   decided   what the ladder's rungs established (ephd.rungs): the hooks'
--             request (made only for a hook that runs), the tenant and
--             its access level, its limits, the rate tokens it took
--   parsed    what the route's handler parsed (its module under
--             ephd.handlers, in parse): the names and counts the rungs, a
--             policy's admit and cost, the request log and a shadow see,
--             and args, what its commit needs besides (a grant's row, a
--             switch's body ...)
--   refused   what the live ladder refused with (ephd.ladder): the code
--             and the rung, for a shadow to compare
--
-- One writer besides: the dispatcher clears the rungs' and the handler's
-- parts (writes false) as a request starts, and observe clears what the
-- ladder refused with, so the context is refilled in place, never made.
-- A judge (ephd.verdict) is the dispatcher and the parse of its own
-- context, filled from the request it is asked about.
--
-- The parts are a list, not tables of their own: the fields stay in one
-- flat table, so a read is one lookup as before. Nested (ctx.decided.tenant
-- and so on, each part a table made once), the same pushes cost 1.3 to
-- 1.8% more instructions (callgrind, docs/performance.md), from the extra
-- lookup in every trace the request's path is compiled into. The field
-- names are unique across the parts, so a field names its part;
-- spec/ephd/context_spec.lua dispatches the broker's requests with the
-- context behind a proxy that records who writes it, and fails on a write
-- by anyone but the field's owner, or of a field no part lists.
--
-- What a handler's parse hands its commit in C (a scan, a pop's
-- arguments, a configure's options) is not here but in the request's own
-- operation, ctx.req.op, read through the request each time: a cdata
-- pointer stored in a table would be boxed, an allocation per request.
-- Pure Lua: the CLI's plain LuaJIT loads it (through ephd.verdict).
local _M = {}

_M.PARTS = {
    { name = "routed", owner = "ephd.dispatch",
      fields = { "req", "route", "param", "handler", "family",
                 "forwarded" } },
    { name = "decided", owner = "ephd.rungs",
      fields = { "request", "tenant", "level", "limits", "taken" } },
    { name = "parsed", owner = "ephd.handlers",
      fields = { "queue", "partition", "group", "messages", "bytes",
                 "args" } },
    { name = "refused", owner = "ephd.ladder", fields = { "code", "rung" } },
}

-- A context with every field of every part false.
function _M.new()
    local ctx = {}
    for _, part in ipairs(_M.PARTS) do
        for _, field in ipairs(part.fields) do ctx[field] = false end
    end
    return ctx
end

return _M
