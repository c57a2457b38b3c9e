-- The request context: its parts, who writes each, and a context made
-- from them. One is made when ephd.dispatch loads and refilled for every
-- request (and one per shadow or replay judge, ephd.verdict): every field
-- is there from the start, so filling one never grows a table; building
-- the context per request, and rehashing it as it grew, had been a tenth
-- of a push.
--
-- Its parts are each written by one module, as Kong gives each plugin a
-- namespace of its own: a reader knows where a field came from, and no
-- module changes what another decided. spec/ephd/context_spec.lua runs
-- the broker's requests with every part watched and fails on a write by
-- anyone but the part's owner, or of a field the part does not list.
--
--   ctx's own fields   what the router set (ephd.dispatch): req, the
--                      route's row, its raw :param, its handler, whether
--                      it is the family's, whether a member relayed it
--   ctx.decided        what the ladder's rungs established (ephd.rungs):
--                      the hooks' request (made only for a hook that
--                      runs), the tenant and its access level, its limits,
--                      the rate tokens taken
--   ctx.parsed         what the route's handler parsed (its module under
--                      ephd.handlers, in parse): the names and counts the
--                      rungs, a policy's admit and cost, the request log
--                      and a shadow see, and `args`, what its commit needs
--                      besides (a grant's row, a switch's body ...)
--   ctx.refused        what the live ladder refused with (ephd.ladder): the
--                      code and the rung, for a shadow to compare
--
-- One writer besides: the dispatcher clears every part (writes false) as a
-- request starts, so parts are refilled in place, never made; ephd.verdict
-- is the dispatcher and the parse of its own context, filled from the
-- request it is asked about. A part is a table made once: reaching it
-- through ctx costs the compiled push nothing measurable
-- (docs/performance.md). What a handler's parse hands its commit in C (a
-- scan, a pop's arguments, a configure's options) is the request's own
-- operation, ctx.req.op, read through the request each time: a cdata
-- pointer stored in a table would be boxed, an allocation per request.
-- Pure Lua: the CLI's plain LuaJIT loads it (through ephd.verdict).
local _M = {}

_M.PARTS = {
    { owner = "ephd.dispatch",
      fields = { "req", "route", "param", "handler", "family",
                 "forwarded" } },
    { name = "decided", owner = "ephd.rungs",
      fields = { "request", "tenant", "level", "limits", "taken" } },
    { name = "parsed", owner = "ephd.handlers",
      fields = { "queue", "partition", "group", "messages", "bytes",
                 "args" } },
    { name = "refused", owner = "ephd.ladder", fields = { "code", "rung" } },
}

-- A context with every field false.
function _M.new()
    local ctx = {}
    for _, part in ipairs(_M.PARTS) do
        local t = ctx
        if part.name then
            t = {}
            ctx[part.name] = t
        end
        for _, field in ipairs(part.fields) do t[field] = false end
    end
    return ctx
end

return _M
