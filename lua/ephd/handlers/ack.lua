-- POST /api/v1/ephemeral/ack: C scans the ids, Lua checks the names, C
-- settles each id and answers with one outcome per id.
local ffi = require("ffi")
local core = require("ephd.core")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local scan = ffi.new("ephd_ack_scan_t")

local _M = {}

function _M.parse(ctx)
    if C.ephd_ack_scan(ctx.req, scan) ~= C.EPHD_OK then
        return ffi_string(scan.message)
    end
    local ok, err = validate.name(ffi_string(scan.queue.ptr, scan.queue.len),
                                  "queue")
    if ok and scan.has_group ~= 0 then
        ok, err = validate.name(ffi_string(scan.group.ptr, scan.group.len),
                                "group")
    end
    if not ok then return err end
end

function _M.commit(ctx)
    C.ephd_ack_commit(ctx.req, ctx.tenant, #ctx.tenant, scan)
    return 0
end

return _M
