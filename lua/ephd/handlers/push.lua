-- POST /api/v1/ephemeral/push: C scans the body (every payload validated,
-- none decoded), Lua checks the names, C commits all or nothing.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local _M = {}

-- The scan lands in the request's own operation (req.op), where the commit
-- finds it.
function _M.parse(ctx)
    local req = ctx.req
    if C.ephd_ffi_push_scan(req) ~= C.EPHD_OK then
        return ffi_string(req.op.scan.message)
    end
    -- Read out of the scan at once, in a block of its own: a cdata
    -- reference still live across the calls below would be allocated per
    -- request.
    local queue, partition, messages, bytes, err
    do
        local scan = req.op.scan
        queue = ffi_string(scan.queue.ptr, scan.queue.len)
        partition = ffi_string(scan.partition.ptr, scan.partition.len)
        messages, bytes = scan.count, tonumber(scan.bytes)
    end
    queue, err = validate.name(queue, "queue")
    if not queue then return err end
    partition, err = validate.name(partition, "partition")
    if not partition then return err end
    -- What the rate rung and the policy's cost hook see.
    ctx.push = contract.push(ctx.tenant, queue, partition, messages, bytes)
end

function _M.commit(ctx)
    local op = ctx.req.op
    local count = op.scan.count
    if count > 0 then
        local rc = C.ephd_ffi_push_commit(ctx.req, ctx.tenant, #ctx.tenant,
                                          ctx.limits.c)
        -- Answered by C: relayed to its owner, or owner_moved.
        if rc == C.EPHD_RELAYED then return 0 end
        if rc ~= C.EPHD_OK then return op.refusals end
    end
    reply.json(ctx.req, 201, '{"pushed":' .. count .. '}')
    return 0
end

return _M
