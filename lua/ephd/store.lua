-- What the store (core/store.c) loaded from the database, applied to the
-- broker's Lua side: the declarations (ephd.declarations) and the grants,
-- each load the whole table, at boot, a reconnect, a refresh or a write.
local ffi = require("ffi")
local contract = require("ephd.contract")
local core = require("ephd.core")
local declarations = require("ephd.declarations")
local grants = require("ephd.grants")
local limits = require("ephd.limits")
local shadow = require("ephd.shadow")

local C = core.C
local ffi_string = ffi.string

local _M = {}

_M.apply_declarations = declarations.apply

local grant_row = ffi.new("ephd_grant_row_t")

local function column(v)
    v = tonumber(v)
    return v >= 0 and v or nil
end

-- The grants replace the old ones whole; what was decided from the old
-- ones (limits, a shadow's) is forgotten.
function _M.apply_grants()
    local rows = {}
    for i = 0, C.ephd_ffi_store_rows() - 1 do
        C.ephd_ffi_store_grant(i, grant_row)
        rows[ffi_string(grant_row.tenant.ptr, grant_row.tenant.len)] =
            contract.grant(grant_row.enabled ~= 0,
                           column(grant_row.max_bytes),
                           column(grant_row.max_queues),
                           column(grant_row.max_msgs_per_sec))
    end
    grants.replace(rows)
    limits.forget()
    shadow.forget()
end

return _M
