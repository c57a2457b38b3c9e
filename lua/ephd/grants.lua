-- Grants: the rows of queen.ephemeral_quota, by tenant. A row turned off
-- gates its tenant always; a missing row gates only when
-- QUEEN_EPHEMERAL_REQUIRE_GRANT is on. The columns also feed the tenant's
-- limits (see ephd.limits).
local _M = {}

local rows = {}

-- Replaces every grant at once (each load is the whole table).
function _M.replace(new_rows)
    rows = new_rows
end

function _M.get(tenant)
    return rows[tenant]
end

-- Every grant, by tenant (for the listing; not to be changed).
function _M.all()
    return rows
end

-- Whether a tenant with this grant row (nil: none) may not use the class
-- at all: the rule for any set of rows (a shadow policy's verdict, replay).
function _M.gates(row, require_grant)
    if row then return not row.enabled end
    return require_grant
end

-- Whether the tenant may not use the class at all.
function _M.gated(tenant, require_grant)
    return _M.gates(rows[tenant], require_grant)
end

return _M
