-- POST /api/v1/ephemeral/reset: drop every message, void every lease,
-- rewind every cursor; the queue, its groups and its declaration stay. In a
-- cell, each broker resets its own copy: this one's, then the others'.
local cjson = require("cjson.safe")
local core = require("ephd.core")
local body = require("ephd.body")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local encode = cjson.encode

local FIELDS = { queue = true }

local _M = {}

-- Sent marked by a member fanning out its reset (core/cell/fanout.h).
_M.members_send = true

function _M.parse(ctx)
    local obj, err = body.object(ctx.req, FIELDS)
    if not obj then return err end
    if type(obj.queue) ~= "string" then return "queue must be a string" end
    ctx.queue, err = validate.name(obj.queue, "queue")
    return err
end

function _M.commit(ctx)
    local tenant, queue = ctx.tenant, ctx.queue
    local dropped = C.ephd_ffi_reset(tenant, #tenant, queue, #queue)
    local answer = '{"queue":' .. encode(queue) .. ',"dropped":'
                   .. tostring(tonumber(dropped)) .. '}'
    -- In a cell, C sends it on to the other members and answers once they
    -- have; the answer counts what this broker dropped (docs/cell.md).
    if C.ephd_ffi_reset_fanout(ctx.req, tenant, #tenant, answer, #answer)
            ~= C.EPHD_HELD then
        reply.json(ctx.req, 200, answer)
    end
    return 0
end

return _M
