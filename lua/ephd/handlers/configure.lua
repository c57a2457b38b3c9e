-- POST /api/v1/ephemeral/configure: the declaration is checked whole here.
-- It is written to PostgreSQL before memory, and this build has no
-- declaration store yet, so a valid declaration is the contract's 503 for
-- "no database connection was available".
local body = require("ephd.body")
local options = require("ephd.options")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local FIELDS = { queue = true, options = true }

return function(req, tenant)
    local obj, err = body.object(req, FIELDS)
    if not obj then return reply.bad_request(req, err) end
    if type(obj.queue) ~= "string" then
        return reply.bad_request(req, "queue must be a string")
    end
    local ok
    ok, err = validate.name(obj.queue, "queue")
    if ok then ok, err = options.check(obj.options) end
    if not ok then return reply.bad_request(req, err) end
    reply.refuse(req, "ephemeral_unavailable",
                 "no database connection is available for a declaration "
                 .. "write")
end
