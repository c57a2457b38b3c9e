-- Method and path to a handler name. Only paths; queries and bodies are the
-- handlers' business.
local sub = string.sub

local _M = {}

local EXACT = {
    ["/api/v1/ephemeral/push"] = { POST = "push" },
    ["/api/v1/ephemeral/pop"] = { GET = "pop" },
    ["/api/v1/ephemeral/ack"] = { POST = "ack" },
    ["/api/v1/ephemeral/configure"] = { POST = "configure" },
    ["/api/v1/ephemeral/reset"] = { POST = "reset" },
    ["/api/v1/ephemeral/queues"] = { GET = "queues" },
    ["/api/v1/system/ephemeral"] = { GET = "system_status",
                                     POST = "system_switch" },
    ["/api/v1/system/policy/reload"] = { POST = "policy_reload" },
    ["/api/v1/system/metering"] = { GET = "metering" },
    ["/health"] = { GET = "health" },
    ["/ready"] = { GET = "ready" },
    ["/metrics"] = { GET = "metrics" },
    ["/dashboard"] = { GET = "dashboard" },
}

-- Every route, numbered for the metrics' labels (0 is "none": what the
-- HTTP layer answers itself, 404s and 405s).
_M.NAMES = {
    "push", "pop", "ack", "configure", "reset", "delete", "queues", "depth",
    "system_status", "system_switch", "policy_reload", "metering", "metrics",
    "health", "ready", "dashboard",
}
_M.ID = {}
for i, name in ipairs(_M.NAMES) do _M.ID[name] = i end

-- Routes outside the family: the kill switch does not pause them and no
-- grant gates them.
_M.SYSTEM = {
    system_status = true, system_switch = true, policy_reload = true,
    metering = true, metrics = true,
}

local DELETE_PREFIX = "/api/v1/ephemeral/queue/"
local DEPTH_PREFIX = "/api/v1/ephemeral/queues/"
local DEPTH_SUFFIX = "/depth"

-- HEAD is a GET without its body (C drops the body, keeping the headers),
-- on every GET route but pop: a pop takes messages, and a HEAD must change
-- nothing (RFC 9110 9.3.2).
local function head(methods)
    local get = methods.GET
    return get ~= "pop" and get or nil
end

local function allow(methods)
    local list = {}
    for m in pairs(methods) do list[#list + 1] = m end
    if head(methods) then list[#list + 1] = "HEAD" end
    table.sort(list)
    return table.concat(list, ", ")
end

-- The :queue segment is returned raw (still percent-encoded), and also
-- when it is empty or more than one segment: that is a request for the
-- route with a malformed name, a 400 of its handler's, since a 404 here
-- says the route (or the depth read's queue) does not exist.
local function param(path, prefix, suffix)
    if sub(path, 1, #prefix) ~= prefix then return nil end
    local rest = sub(path, #prefix + 1)
    if suffix then
        if #rest < #suffix or sub(rest, -#suffix) ~= suffix then
            return nil
        end
        rest = sub(rest, 1, -#suffix - 1)
    end
    return rest
end

-- Returns name, param on a match; otherwise nil, status, message, allow.
function _M.route(method, path)
    local methods = EXACT[path]
    local p
    if not methods then
        p = param(path, DELETE_PREFIX)
        if p then
            methods = { DELETE = "delete" }
        else
            p = param(path, DEPTH_PREFIX, DEPTH_SUFFIX)
            if p then methods = { GET = "depth" } end
        end
    end
    if not methods then
        return nil, 404, "no route " .. path
    end
    local name = methods[method] or (method == "HEAD" and head(methods))
    if not name then
        return nil, 405, method .. " is not allowed on " .. path,
               allow(methods)
    end
    return name, p
end

return _M
