-- The two per-request logs, both off by default: `refused` lines
-- (QUEEN_EPHEMERAL_LOG_REFUSALS: who got which code, for any error answer)
-- and `request` lines (QUEEN_EPHEMERAL_LOG_REQUESTS: one per request the
-- ladder decided, with what `ephd policy replay` needs to ask another
-- policy about it). Names and numbers only: never a payload, never a
-- credential, not even hashed.
--
-- A request's buffers are C's until it is answered, and the answer is
-- written inside the decision (a refusal, or the handler's commit), so the
-- ladder hands the request over just before it decides (decided) and the
-- line is written just after (done); ephd.reply tells what code answered
-- in between (refused).
local ffi = require("ffi")
local core = require("ephd.core")
local log = require("ephd.log")
local tenancy = require("ephd.tenancy")

local ffi_string = ffi.string

local _M = {}

_M.refusals = core.config.log_refusals ~= 0
_M.requests = core.config.log_requests ~= 0

-- The request being dispatched: ephd.dispatch hands its one context over
-- once (its tenant is false until the identity rung established one).
local current = {}

function _M.context(ctx)
    current = ctx
end

-- The request line being made, between decided and done; nil otherwise.
local line

-- Its fields, sorted as ephd.log sorts any line's: given, not sorted per
-- request.
local KEYS = { "access", "bytes", "code", "forwarded", "group", "identity",
               "messages", "method", "partition", "path", "queue", "route",
               "rung", "status", "tenant" }

-- Where a push or an ack names its queue: read from the scan C made,
-- which holds checked names only once the shape rung has passed (the
-- commit reached, or a later rung refusing). A push refused for its
-- shape may name a queue of any length up to the body's, or with control
-- characters: never logged.
local function scanned(ctx, shaped)
    local name = ctx.route.name
    if not shaped or (name ~= "push" and name ~= "ack") then return end
    local scan = ctx.req.op.scan
    local queue = scan.has_queue ~= 0
                  and ffi_string(scan.queue.ptr, scan.queue.len) or nil
    local partition = name == "push"
                      and ffi_string(scan.partition.ptr, scan.partition.len)
                      or nil
    return queue, partition
end

-- The ladder is about to answer ctx's request: committing says whether
-- that is its handler's commit (every rung passed) or the refusal of the
-- rung named `rung`.
function _M.decided(ctx, committing, rung)
    local req = ctx.req
    local route = ctx.route
    local queue, partition = ctx.queue or nil, ctx.partition or nil
    if not queue then
        queue, partition = scanned(ctx, committing
                                         or (ctx.messages and rung ~= "shape"))
    end
    line = {
        route = route.name,
        method = ffi_string(req.method.ptr, req.method.len),
        path = ffi_string(req.path.ptr, req.path.len),
        -- The tenant as read before any hook (the header, or the
        -- default); nothing when the header was no tenant id. A relayed
        -- request's is the one the edge established.
        tenant = ctx.forwarded and (ctx.tenant or nil)
                 or (tenancy.tenant(req)),
        -- Who the identity rung established, and its access level (not
        -- `level`, which is the line's own).
        identity = ctx.tenant or nil,
        access = ctx.level or nil,
        forwarded = ctx.forwarded or nil,
        queue = queue, partition = partition, group = ctx.group or nil,
        messages = ctx.messages or nil, bytes = ctx.bytes or nil,
        -- Which rung refused, if one does: the commit's budgets (or its
        -- handler's own refusal), or the rung ephd.ladder names.
        rung = committing and "commit" or nil,
    }
end

-- An error answer, from ephd.reply: the refused line, and the request
-- line's code and status when one is being made.
function _M.refused(code, status, message)
    if _M.refusals then
        local route = current.route
        log.info("refused", {
            tenant = current.tenant or nil,
            route = route and route.name or nil,
            status = status, code = code, error = message,
        })
    end
    if line then line.code, line.status = code, status end
end

-- The decision is answered (or handed to C to answer later: a parked pop,
-- a held write, a relayed request): code "pass" when no rung refused.
function _M.done(ctx)
    if not line.code then
        line.code, line.rung = "pass", nil
    elseif not line.rung then
        line.rung = ctx.rung or nil
    end
    log.line("request", log.ordered(KEYS, line))
    line = nil
end

return _M
