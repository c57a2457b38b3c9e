-- POST /api/v1/ephemeral/reset: drop every message, void every lease,
-- rewind every cursor; the queue, its groups and its declaration stay.
local cjson = require("cjson.safe")
local core = require("ephd.core")
local body = require("ephd.body")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local encode = cjson.encode

local FIELDS = { queue = true }

local _M = {}

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
    reply.json(ctx.req, 200, '{"queue":' .. encode(queue) .. ',"dropped":'
                             .. tostring(tonumber(dropped)) .. '}')
    return 0
end

return _M
