-- Access levels: what each route needs, and which level grants which. The
-- levels are the contract's; read-write holds read-only and write-only,
-- admin holds everything.
local _M = {}

_M.ROUTES = {
    push = "write-only",
    pop = "read-write",
    ack = "read-write",
    configure = "read-write",
    reset = "read-write",
    delete = "read-write",
    queues = "read-only",
    depth = "read-only",
    system_status = "admin",
    system_switch = "admin",
    policy_reload = "admin",
    metering = "admin",
    metrics = "admin",
}

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

-- Whether a holder of `level` may call `route`.
function _M.allows(level, route)
    local held = GRANTS[level]
    return held ~= nil and held[_M.ROUTES[route]] == true
end

return _M
