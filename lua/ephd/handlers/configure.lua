-- POST /api/v1/ephemeral/configure: the declaration is checked whole here
-- and clamped to the values in force; C writes it to PostgreSQL first,
-- applies it to memory second, and answers 201 with what was stored.
local ffi = require("ffi")
local core = require("ephd.core")
local body = require("ephd.body")
local options = require("ephd.options")
local reply = require("ephd.reply")
local validate = require("ephd.validate")

local C = core.C
local config = core.config

local FIELDS = { queue = true, options = true }

local in_force = ffi.new("ephd_options_t")

return function(req, tenant)
    local obj, err = body.object(req, FIELDS)
    if not obj then return reply.bad_request(req, err) end
    if type(obj.queue) ~= "string" then
        return reply.bad_request(req, "queue must be a string")
    end
    local queue, opts
    queue, err = validate.name(obj.queue, "queue")
    if queue and obj.options ~= nil and body.kind(req, "options") ~= "{" then
        queue, err = nil, "options must be an object"
    end
    if queue then
        opts, err = options.check(obj.options, body.raw(
            ffi.string(req.body.ptr, req.body.len), "options"))
    end
    if not opts then return reply.bad_request(req, err) end
    options.in_force(opts, config, in_force)
    if C.ephd_configure(req, tenant, #tenant, queue, #queue, in_force)
            == C.EPHD_E_UNAVAILABLE then
        return reply.refuse(req, "ephemeral_unavailable",
                            "no database connection is available for a "
                            .. "declaration write")
    end
end
