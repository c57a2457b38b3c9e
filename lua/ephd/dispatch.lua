-- The request's entry point from C: dispatch (one call per request) routes
-- it, then runs the open route's handler or the ladder; observe (after
-- dispatch, while a shadow is loaded) hands the request the ladder decided
-- to the shadow. Each route's handler is resolved here from its row.
local context = require("ephd.context")
local core = require("ephd.core")
local ladder = require("ephd.ladder")
local reply = require("ephd.reply")
local requestlog = require("ephd.requestlog")
local router = require("ephd.router")
local shadow = require("ephd.shadow")

local C = core.C
local request_slot = core.request_slot

-- Each route's handler, by id: the row names a module of ephd.handlers, or
-- a field of one.
local HANDLERS = {}
for i, r in ipairs(router.ROUTES) do
    local module, field = r.handler:match("^([%w_]+)%.?([%w_]*)$")
    local h = module and require("ephd.handlers." .. module)
    if field ~= "" then h = h and h[field] end
    if not h then
        error("ephd.routes: no handler " .. r.handler .. " for " .. r.name, 0)
    end
    HANDLERS[i] = h
end

local _M = {}

-- One context (ephd.context: its parts, and the one module that writes
-- each), refilled per request: dispatch is never re-entered (a push that
-- wakes a parked pop answers it in C) and nothing keeps a context past its
-- request. Dispatch writes the router's part, and clears the rungs' and
-- the handler's as a request starts.
local ctx = context.new()

requestlog.context(ctx)

-- After dispatch, while a shadow is loaded (C calls it then, and only
-- then: a call of its own, so the live request's trace stays as short as
-- without one): the shadow judges the request the ladder decided, if it
-- did (ctx.req is set for it alone, and cleared here), its answer
-- written. ctx.code and ctx.rung say what the ladder refused with.
function _M.observe()
    local c = ctx
    if not c.req then return end
    local s = shadow.current
    if s then shadow.observe(c, s) end
    c.req, c.code, c.rung = false, false, false
end

function _M.dispatch()
    local req = request_slot[0]
    local route, status, message, allow = router.route(req)
    if not route then
        -- Nobody yet, for the refusal log; nothing for a shadow to judge
        -- (ctx.req is left set by a dispatch that raised, which C does
        -- not observe, and that request's buffers are gone).
        ctx.req, ctx.route, ctx.tenant = false, false, false
        return reply.refuse(req, status == 404 and "route_not_found"
                                 or "ephemeral_bad_request", message, status,
                            allow)
    end
    local id = route.id
    C.ephd_ffi_request_route(req, id)
    if route.class == "open" then
        ctx.req = false
        return HANDLERS[id](req)
    end
    local c = ctx
    c.req, c.route = req, route
    c.param = route.param and router.param()
    c.handler, c.family = HANDLERS[id], route.class == "family"
    c.request, c.tenant, c.level, c.limits, c.taken = false, false, false,
                                                      false, false
    c.queue, c.partition, c.messages, c.bytes = false, false, false, false
    c.group, c.args = false, false
    -- Marked as relayed by a member of the cell: the identity rung trusts
    -- the mark or refuses the request (ephd.ladder). Read here, not in
    -- the rung: there the same read cost a push ~300 instructions more
    -- (callgrind), here nothing measurable.
    c.forwarded = req.forward.len ~= 0
    return ladder.run(c)
end

return _M
