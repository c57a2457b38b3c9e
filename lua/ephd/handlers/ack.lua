-- POST /api/v1/ephemeral/ack: C scans the ids, Lua checks the names, C
-- settles each id and answers with one outcome per id.
local ffi = require("ffi")
local core = require("ephd.core")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local _M = {}

-- Served by the members its ids' epochs name (core/cell/routing.h).
_M.routed = C.EPHD_CELL_ACK

-- The scan lands in the request's own operation (req.op), where the commit
-- finds it; its names are read out at once (see push.lua).
function _M.parse(ctx)
    local req = ctx.req
    if C.ephd_ffi_ack_scan(req) ~= C.EPHD_OK then
        return ffi_string(req.op.scan.message)
    end
    local queue, group
    do
        local scan = req.op.scan
        queue = ffi_string(scan.queue.ptr, scan.queue.len)
        group = scan.has_group ~= 0
                and ffi_string(scan.group.ptr, scan.group.len) or nil
    end
    local ok, err = validate.name(queue, "queue")
    -- An empty group is queue mode, as the pop's (C reads it as such).
    if ok and group and group ~= "" then
        ok, err = validate.name(group, "group")
    end
    if not ok then return err end
    -- What admit sees.
    ctx.queue, ctx.group = queue, group ~= "" and group or false
end

function _M.commit(ctx)
    C.ephd_ffi_ack_commit(ctx.req, ctx.tenant, #ctx.tenant)
    return 0
end

return _M
