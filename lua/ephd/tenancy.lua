-- Who the request is for, before the policy's authenticate hook has its
-- say. The tenant comes from the request's identity and never from a body:
-- the x-queen-tenant header when QUEEN_TENANCY_HEADER is on, the default
-- tenant otherwise.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local rungs = require("ephd.rungs")

local _M = {}

_M.DEFAULT = "00000000-0000-0000-0000-000000000001"

-- Tenants are UUIDs, as in queen's tables (and the hooks' contract).
_M.valid = contract.is_tenant

local lowered = ffi.new("char[36]")

-- Returns the tenant id, lowercase, or nil and why the header is unusable.
-- Checked and lowered in C: a pattern match here is never compiled, and
-- cost every request of a multi-tenant broker a trip to the interpreter.
function _M.tenant(req)
    if core.config.tenancy_header == 0 or req.tenant.len == 0 then
        return _M.DEFAULT
    end
    if core.C.ephd_ffi_uuid_lower(req.tenant.ptr, req.tenant.len, lowered)
       ~= core.C.EPHD_OK then
        return nil, rungs.NO_TENANT
    end
    return ffi.string(lowered, 36)
end

return _M
