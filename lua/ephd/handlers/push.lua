-- POST /api/v1/ephemeral/push: C scans the body (every payload validated,
-- none decoded), Lua checks the names, C commits all or nothing.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local ffi_string = ffi.string

local scan = ffi.new("ephd_push_scan_t")
local refusals = ffi.new("uint32_t[1]")

local _M = {}

function _M.parse(ctx)
    if C.ephd_push_scan(ctx.req, scan) ~= C.EPHD_OK then
        return ffi_string(scan.message)
    end
    local queue, err = validate.name(
        ffi_string(scan.queue.ptr, scan.queue.len), "queue")
    if not queue then return err end
    local partition
    partition, err = validate.name(
        ffi_string(scan.partition.ptr, scan.partition.len), "partition")
    if not partition then return err end
    -- What the rate rung and the policy's cost hook see.
    ctx.push = contract.push(ctx.tenant, queue, partition, scan.count,
                             tonumber(scan.bytes))
end

function _M.commit(ctx)
    local count = scan.count
    if count > 0 and C.ephd_push_commit(ctx.tenant, #ctx.tenant, scan,
                                        ctx.limits.c, refusals)
            ~= C.EPHD_OK then
        return refusals[0]
    end
    reply.json(ctx.req, 201, '{"pushed":' .. count .. '}')
    return 0
end

return _M
