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

-- What a route may need beside the levels: any identity, whatever its
-- level (the cell's placement view, which a producer holding write-only
-- and a consumer holding read-only both route by). No credential holds
-- it: a policy names one of the four levels.
_M.ANY = "any"

function _M.is_level(level)
    return GRANTS[level] ~= nil
end

-- Whether `needed` is something a route may ask for: a level, or ANY.
function _M.is_route_level(needed)
    return needed == _M.ANY or GRANTS[needed] ~= nil
end

-- Whether a holder of `level` may call a route that needs `needed`.
function _M.allows(level, needed)
    local held = GRANTS[level]
    return held ~= nil and (held[needed] == true or needed == _M.ANY)
end

return _M
