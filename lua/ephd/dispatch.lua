-- The one entry point C calls per request: route, identify the tenant, run
-- the policy's authenticate hook, then hand over to the route's handler.
local ffi = require("ffi")
local core = require("ephd.core")
local declarations = require("ephd.declarations")
local errors = require("ephd.errors")
local policy = require("ephd.policy")
local reply = require("ephd.reply")
local router = require("ephd.router")
local tenancy = require("ephd.tenancy")

local cast, ffi_string = ffi.cast, ffi.string
local request_t = core.request_t

local HANDLERS = {}
for _, name in ipairs({ "push", "pop", "ack", "configure", "reset", "delete",
                        "queues", "depth" }) do
    HANDLERS[name] = require("ephd.handlers." .. name)
end

local _M = {}

local active
-- Counted, not logged per request: a broken hook must not flood the log.
_M.hook_failures = 0

-- C's second entry point: a load of declarations to apply (boot, refresh).
_M.apply_declarations = declarations.apply

function _M.init(policy_dir)
    local p, err = policy.load(policy_dir)
    if not p then return nil, err end
    active = p
    return true
end

local function hook_refused(req, route, tenant)
    local authenticate = active.hooks.authenticate
    if not authenticate then return false end
    local ok, code, reason = pcall(authenticate, {
        route = route,
        tenant = tenant,
        authorization = ffi_string(req.authorization.ptr,
                                   req.authorization.len),
    })
    if ok and code == nil then return false end
    if not ok or not errors.is_code(code) then
        _M.hook_failures = _M.hook_failures + 1
        reply.refuse(req, "ephemeral_unavailable",
                     "the policy could not decide this request")
        return true
    end
    reply.refuse(req, code, type(reason) == "string" and reason
                             or "refused by policy")
    return true
end

function _M.dispatch(ud)
    local req = cast(request_t, ud)
    local path = ffi_string(req.path.ptr, req.path.len)
    local method = ffi_string(req.method.ptr, req.method.len)
    local route, param, message, allow = router.route(method, path)
    if not route then
        local status = param
        return reply.refuse(req, "ephemeral_bad_request", message, status,
                            allow and ("Allow: " .. allow .. "\r\n"))
    end
    local tenant, err = tenancy.tenant(req)
    if not tenant then return reply.bad_request(req, err) end
    if hook_refused(req, route, tenant) then return end
    return HANDLERS[route](req, tenant, param)
end

return _M
