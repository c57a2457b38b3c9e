-- POST /api/v1/ephemeral/push: C scans the body (every payload validated,
-- none decoded) and checks the names, Lua says why a name is refused, C
-- commits all or nothing.
local ffi = require("ffi")
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local implicit = require("ephd.implicit")
local reply = require("ephd.reply")
local shadow = require("ephd.shadow")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local _M = {}

-- Served by its partition's owner (core/cell/routing.h).
_M.routed = C.EPHD_CELL_PUSH

-- The scan lands in the request's own operation (req.op), where the commit
-- finds it.
function _M.parse(ctx)
    local req = ctx.req
    if C.ephd_ffi_push_scan(req) ~= C.EPHD_OK then
        return ffi_string(req.op.scan.message)
    end
    -- Read out of the scan at once, in blocks of their own: a cdata
    -- reference still live across the calls below would be allocated per
    -- request.
    local messages, bytes, clean
    do
        local scan = req.op.scan
        messages, bytes = scan.count, tonumber(scan.bytes)
        clean = scan.names_clean ~= 0
    end
    -- What the rate rung takes.
    ctx.messages, ctx.bytes = messages, bytes
    -- C checked the names as it scanned them, and the default cost needs
    -- none: Lua reads them only to say why C did not pass one, or for a
    -- cost or admit hook, the live policy's or a shadow's (which judges
    -- after the answer, when the scan is gone: it reads them here, in ctx).
    if clean and not hooks.active.reads_names then
        local s = shadow.current
        if not s or not s.p.reads_names then return end
    end
    local queue, partition, err
    do
        local scan = req.op.scan
        queue = ffi_string(scan.queue.ptr, scan.queue.len)
        partition = ffi_string(scan.partition.ptr, scan.partition.len)
    end
    if not clean then
        queue, err = validate.name(queue, "queue")
        if not queue then return err end
        partition, err = validate.name(partition, "partition")
        if not partition then return err end
    end
    ctx.queue, ctx.partition = queue, partition
end

local function queue_of(op)
    local scan = op.scan
    return ffi_string(scan.queue.ptr, scan.queue.len)
end

-- A commit answers its own 201; an empty array commits nothing.
function _M.commit(ctx)
    local op = ctx.req.op
    if op.scan.count == 0 then
        reply.json(ctx.req, 201, '{"pushed":0}')
        return 0
    end
    -- EPHD_OK was answered by C.
    local rc = C.ephd_ffi_push_commit(ctx.req, ctx.tenant, #ctx.tenant,
                                      ctx.limits.c)
    if rc == C.EPHD_OK then return 0 end
    if rc == C.EPHD_E_NEW_QUEUE then
        implicit.fill(ctx.req, ctx.tenant, queue_of(op))
        rc = C.ephd_ffi_push_commit(ctx.req, ctx.tenant, #ctx.tenant,
                                    ctx.limits.c)
        if rc == C.EPHD_OK then return 0 end
    end
    return op.refusals
end

return _M
