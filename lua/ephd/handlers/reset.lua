-- POST /api/v1/ephemeral/reset: drop every message, void every lease,
-- rewind every cursor; the queue and its groups stay.
local cjson = require("cjson.safe")
local core = require("ephd.core")
local body = require("ephd.body")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local encode = cjson.encode

local FIELDS = { queue = true }

return function(req, tenant)
    local obj, err = body.object(req, FIELDS)
    if not obj then return reply.bad_request(req, err) end
    if type(obj.queue) ~= "string" then
        return reply.bad_request(req, "queue must be a string")
    end
    local queue
    queue, err = validate.name(obj.queue, "queue")
    if not queue then return reply.bad_request(req, err) end
    local dropped = C.ephd_reset(tenant, #tenant, queue, #queue)
    reply.json(req, 200, '{"queue":' .. encode(queue) .. ',"dropped":'
                         .. tostring(tonumber(dropped)) .. '}')
end
