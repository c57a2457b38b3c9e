-- POST /api/v1/ephemeral/configure: the declaration is checked whole here
-- and clamped to the values in force; C writes it to PostgreSQL first,
-- applies it to memory second, and answers 201 with what was stored.
local ffi = require("ffi")
local core = require("ephd.core")
local body = require("ephd.body")
local options = require("ephd.options")
local validate = require("ephd.validate")

local C = core.C
local config = core.config

local FIELDS = { queue = true, options = true }

local _M = {}

function _M.parse(ctx)
    local req = ctx.req
    local obj, err = body.object(req, FIELDS)
    if not obj then return err end
    if type(obj.queue) ~= "string" then return "queue must be a string" end
    local queue, opts
    queue, err = validate.name(obj.queue, "queue")
    if not queue then return err end
    if obj.options ~= nil and body.kind(req, "options") ~= "{" then
        return "options must be an object"
    end
    opts, err = options.check(obj.options, body.raw(
        ffi.string(req.body.ptr, req.body.len), "options"))
    if not opts then return err end
    options.in_force(opts, config, ctx.req.op.options)
    ctx.queue = queue
end

function _M.commit(ctx)
    local tenant, queue = ctx.tenant, ctx.queue
    local rc = C.ephd_ffi_configure(ctx.req, tenant, #tenant, queue, #queue,
                                ctx.limits.c)
    if rc == C.EPHD_E_REFUSED then return ctx.req.op.refusals end
    if rc == C.EPHD_E_UNAVAILABLE then
        return 0, "ephemeral_unavailable", "no database connection is "
                  .. "available for a declaration write"
    end
    return 0
end

return _M
