-- Method and path to a route of the table (ephd.routes). The rows are
-- checked and given to C's matcher once, when this module loads; a request
-- is then routed in C, with no Lua string made of its method or path. Only
-- paths: queries and bodies are the handlers' business.
local ffi = require("ffi")
local core = require("ephd.core")
local access = require("ephd.access")
local routes = require("ephd.routes")

local C = core.C
local ffi_string = ffi.string

local _M = {}

local CLASSES = { family = true, system = true, open = true }

-- Every route by id (its row's place in the table) and by name, each row
-- given what the table implies: id, whether it has a :queue segment, and
-- the Allow header of its path (the methods of the rows sharing it, and
-- HEAD where a GET answers it).
_M.ROUTES = routes
_M.BY_NAME = {}

local function shape(path)
    return (path:gsub("/:[%w_]+", "/:"))
end

local function check(i, r)
    local why
    if type(r.name) ~= "string" or _M.BY_NAME[r.name] then
        why = "a name of its own"
    elseif not CLASSES[r.class] then
        why = "class family, system or open"
    elseif (r.class == "open") ~= (r.level == nil)
            or (r.level and not access.is_route_level(r.level)) then
        why = "a level of ephd.access unless it is open"
    elseif type(r.handler) ~= "string" then
        why = "a handler"
    end
    if why then
        error(("ephd.routes: row %d (%s) needs %s"):format(
            i, tostring(r.name), why), 0)
    end
end

local by_path = {}
for i, r in ipairs(routes) do
    check(i, r)
    r.id = i
    r.head = r.method == "GET" and r.head ~= false
    r.param = r.path:find(":", 1, true) ~= nil
    _M.BY_NAME[r.name] = r
    local p = shape(r.path)
    by_path[p] = by_path[p] or {}
    table.insert(by_path[p], r)
end

for _, rows in pairs(by_path) do
    local methods = {}
    for _, r in ipairs(rows) do
        methods[#methods + 1] = r.method
        if r.head then methods[#methods + 1] = "HEAD" end
    end
    table.sort(methods)
    local allow = "Allow: " .. table.concat(methods, ", ") .. "\r\n"
    for _, r in ipairs(rows) do r.allow = allow end
end

do
    local rows = ffi.new("ephd_route_row_t[?]", #routes)
    for i, r in ipairs(routes) do
        rows[i - 1].method = r.method
        rows[i - 1].path = r.path
        rows[i - 1].head = r.head and 1 or 0
    end
    -- C copies the rows: the strings need live only through the call.
    if C.ephd_ffi_routes_define(rows, #routes) ~= C.EPHD_OK then
        error("ephd.routes: the matcher cannot take this table (at most "
              .. C.EPHD_ROUTES_MAX .. " rows; a path starts with '/' and "
              .. "has at most one :segment; methods are in capitals, each "
              .. "once per path)", 0)
    end
end

local match = ffi.new("ephd_route_match_t")

-- Returns the route; or nil, status, message and the Allow header line
-- (a 405's).
function _M.route(req)
    local rc = C.ephd_ffi_route(req, match)
    if rc == C.EPHD_OK then return routes[match.route] end
    local path = ffi_string(req.path.ptr, req.path.len)
    if rc == C.EPHD_E_NOT_FOUND then
        return nil, 404, "no route " .. path
    end
    return nil, 405, ffi_string(req.method.ptr, req.method.len)
                     .. " is not allowed on " .. path,
           routes[match.route].allow
end

-- The :queue segment of the request last routed, raw.
function _M.param()
    return ffi_string(match.param.ptr, match.param.len)
end

return _M
