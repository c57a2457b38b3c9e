-- Shared by every spec: module paths, a double of ephd.core for unit specs
-- (real types and constants from core/ffi.h, C functions supplied by the
-- spec), and the domain assertions.
local ffi = require("ffi")
local assert = require("luassert")
local say = require("say")

local root = os.getenv("EPHD_SOURCE_DIR") or "."
local build = os.getenv("EPHD_BUILD_DIR") or (root .. "/build")
package.path = table.concat({
    root .. "/lua/?.lua", build .. "/lua/?.lua", root .. "/spec/?.lua",
    package.path,
}, ";")

local helper = { root = root, build = build }

local declared = false
local function declare()
    if not declared then
        ffi.cdef(require("ephd.abi"))
        declared = true
    end
end

helper.DEFAULT_CONFIG = {
    pop_timeout_ms = 30000, max_pop_timeout_ms = 300000, max_batch = 10000,
    max_items = 10000, max_name_bytes = 512, tenancy_header = 0,
    defaults = { max_bytes = 16777216, max_length = 10000, drop_oldest = 0,
                 ttl_s = 0, lease_s = 30, retry_limit = 5, window_ms = 0,
                 window_count = 0 },
    max_cell_bytes = 268435456,
    rate = 5000, burst = 10000, max_parked = 100000, retry_after_s = 30,
    tenant_max_queues = 100000,
    require_grant = 0,
}

-- The engine's objects as a shared library: the pure helpers of ffi.h
-- (percent-decoding, JSON fields) run for real in unit specs.
local engine_lib
local function engine()
    engine_lib = engine_lib or ffi.load(build .. "/libephd_engine_shared.so")
    return engine_lib
end

local PURE = { ephd_ffi_url_decode = true, ephd_ffi_json_field = true,
               ephd_ffi_json_members = true, ephd_ffi_routes_define = true,
               ephd_ffi_route = true,
               ephd_ffi_log_fields = true, ephd_ffi_utf8_valid = true,
               ephd_ffi_uuid_lower = true }

-- A cell of one, as a broker without a database is.
local CELL_OF_ONE = ffi.new("uint32_t[1]", 1)

-- Brackets around policy code: no watchdog in unit specs.
local NOOP = { ephd_ffi_cell_size = function() return CELL_OF_ONE end,
               ephd_ffi_policy_enter = function() end,
               ephd_ffi_policy_leave = function() end,
               ephd_ffi_metrics_route = function() end,
               ephd_ffi_request_route = function() end,
               -- Whether C asks for a new queue's options (ephd.implicit).
               ephd_ffi_queue_options = function() end,
               -- The ladder takes the clock when it loads (a spec whose
               -- requests reach the rate rung sets its own).
               ephd_ffi_now_ms = function() return 0ULL end }

-- Installs a fresh ephd.core whose C resolves enum constants and the pure
-- helpers for real and other functions from `fns`; a function the spec did
-- not supply fails loudly.
function helper.core_double(fns, config)
    declare()
    for name in pairs(package.loaded) do
        if name:find("^ephd%.") then package.loaded[name] = nil end
    end
    -- An error answer is a response that carries its code (for
    -- /metrics): a spec that watches responses sees it as one. Made here,
    -- not in __index, whose closures would keep traces from compiling.
    local respond = fns and fns.ephd_ffi_respond
    if respond and not fns.ephd_ffi_refuse then
        fns.ephd_ffi_refuse = function(req, _, status, headers, body, len)
            return respond(req, status, headers, body, len)
        end
    end
    local C = setmetatable({}, {
        __index = function(_, k)
            if fns and fns[k] then return fns[k] end
            if PURE[k] then return engine()[k] end
            if NOOP[k] then return NOOP[k] end
            return ffi.C[k]
        end,
    })
    local cfg = {}
    for k, v in pairs(helper.DEFAULT_CONFIG) do cfg[k] = v end
    for k, v in pairs(config or {}) do cfg[k] = v end
    helper.slot = ffi.new("const ephd_request_t *[1]")
    package.loaded["ephd.core"] = {
        C = C,
        ABI_VERSION = 10,
        request_t = ffi.typeof("const ephd_request_t *"),
        request_slot = helper.slot,
        config = ffi.new("ephd_config_t", cfg),
    }
    return C
end

-- A request as C would hand it over; `anchor` keeps the strings alive.
function helper.request(t)
    declare()
    local req = ffi.new("ephd_request_t")
    local anchor = {}
    for _, field in ipairs({ "method", "path", "query", "body", "tenant",
                             "authorization", "content_type", "origin",
                             "host", "fetch_site" }) do
        local s = t[field] or ""
        anchor[#anchor + 1] = s
        req[field].ptr = s
        req[field].len = #s
    end
    -- Its own operation, as C attaches one to every request dispatched.
    local op = ffi.new("ephd_op_t")
    anchor[#anchor + 1] = op
    req.op = op
    return req, anchor
end

-- A route's row of the table (ephd.routes), as the router hands it over.
function helper.route(name)
    for _, r in ipairs(require("ephd.routes")) do
        if r.name == name then return r end
    end
    error("no route " .. name)
end

-- A request context as the ladder hands it to a handler: past the rungs,
-- for `tenant`, with no limits unless given.
function helper.ctx(t, tenant, limits)
    declare()
    local req, anchor = helper.request(t)
    return {
        req = req, anchor = anchor, param = t.param,
        family = true,
        tenant = tenant or "00000000-0000-0000-0000-000000000001",
        limits = { rate = 0, burst = 1,
                   c = ffi.new("ephd_tenant_limits_t", limits or {}) },
    }
end

-- A spy for ephd_ffi_respond: records every answer written.
function helper.responder()
    local answers = {}
    local function respond(_, status, headers, body, len)
        answers[#answers + 1] = {
            status = status,
            headers = headers ~= nil and ffi.string(headers) or nil,
            body = ffi.string(body, len),
        }
    end
    return respond, answers
end

local function refused_with(state, args)
    local code, res = args[1], args[2]
    local cjson = require("cjson")
    local ok, body = pcall(cjson.decode, res.body or "")
    if not ok or type(body) ~= "table" then return false end
    state.failure_message = ("expected code %s, got status %s body %s")
        :format(code, tostring(res.status), tostring(res.body))
    local status = require("ephd.errors").status(code)
    return body.code == code and type(body.error) == "string"
           and (res.status == status or args[3] == res.status)
end
say:set("assertion.refused_with.positive", "expected refusal %s in %s")
assert:register("assertion", "refused_with", refused_with,
                "assertion.refused_with.positive")

-- Runs a shell command; returns what it printed (stdout and stderr) and
-- its exit status.
function helper.run(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"exit=$?\"")
    local out = p:read("*a")
    p:close()
    local body, code = out:match("^(.*)exit=(%d+)%s*$")
    return body, tonumber(code)
end

return helper
