-- POST /api/v1/ephemeral/push: C scans the body (every payload validated,
-- none decoded), Lua checks the names, C commits all or nothing.
local ffi = require("ffi")
local core = require("ephd.core")
local ladder = require("ephd.ladder")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local scan = ffi.new("ephd_push_scan_t")
local refusals = ffi.new("uint32_t[1]")

return function(req, tenant)
    if C.ephd_push_scan(req, scan) ~= C.EPHD_OK then
        return reply.bad_request(req, ffi_string(scan.message))
    end
    local ok, err = validate.name(ffi_string(scan.queue.ptr, scan.queue.len),
                                  "queue")
    if ok then
        ok, err = validate.name(
            ffi_string(scan.partition.ptr, scan.partition.len), "partition")
    end
    if not ok then return reply.bad_request(req, err) end
    local count = scan.count
    if count > 0 and C.ephd_push_commit(tenant, #tenant, scan, refusals)
            ~= C.EPHD_OK then
        local code, message = ladder.budget(refusals[0])
        return reply.refuse(req, code, message)
    end
    reply.json(req, 201, '{"pushed":' .. count .. '}')
end
