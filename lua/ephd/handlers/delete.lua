-- DELETE /api/v1/ephemeral/queue/:queue: contents, cursors and declaration.
-- Never a 404: `deleted` describes the outcome. Declarations arrive with
-- the PostgreSQL store; until then there is never one to remove.
local cjson = require("cjson.safe")
local core = require("ephd.core")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local encode = cjson.encode

return function(req, tenant, raw)
    local queue, err = validate.unescape(raw, false)
    if queue then queue, err = validate.name(queue, "queue") end
    if not queue then return reply.bad_request(req, err) end
    local deleted = C.ephd_delete(tenant, #tenant, queue, #queue) ~= 0
    reply.json(req, 200, '{"queue":' .. encode(queue) .. ',"deleted":'
                         .. tostring(deleted) .. ',"declared":false}')
end
