-- Who the request is for, before the policy's authenticate hook has its
-- say. The tenant comes from the request's identity and never from a body:
-- the x-queen-tenant header when QUEEN_TENANCY_HEADER is on, the default
-- tenant otherwise.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")

local _M = {}

_M.DEFAULT = "00000000-0000-0000-0000-000000000001"

-- Tenants are UUIDs, as in queen's tables (and the hooks' contract).
_M.valid = contract.is_tenant

-- Returns the tenant id, or nil and why the header is unusable.
function _M.tenant(req)
    if core.config.tenancy_header == 0 or req.tenant.len == 0 then
        return _M.DEFAULT
    end
    local t = ffi.string(req.tenant.ptr, req.tenant.len)
    if not _M.valid(t) then
        return nil, "x-queen-tenant must be a UUID"
    end
    return t:lower()
end

return _M
