-- Access levels, and which level holds which. The levels are the
-- contract's; read-write holds read-only and write-only, admin holds
-- everything. What each route needs is its row's level (ephd.routes).
local _M = {}

local GRANTS = {
    ["admin"] = { ["admin"] = true, ["read-write"] = true,
                  ["read-only"] = true, ["write-only"] = true },
    ["read-write"] = { ["read-write"] = true, ["read-only"] = true,
                       ["write-only"] = true },
    ["read-only"] = { ["read-only"] = true },
    ["write-only"] = { ["write-only"] = true },
}

function _M.is_level(level)
    return GRANTS[level] ~= nil
end

-- Whether a holder of `level` may call a route that needs `needed`.
function _M.allows(level, needed)
    local held = GRANTS[level]
    return held ~= nil and held[needed] == true
end

return _M
