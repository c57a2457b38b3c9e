-- GET /health (the process answers) and GET /ready (a policy is in force;
-- the database's state is reported but does not make the broker unready,
-- since push, pop and ack serve without it).
local cjson = require("cjson.safe")
local core = require("ephd.core")
local hooks = require("ephd.hooks")
local reply = require("ephd.reply")

local C = core.C
local encode = cjson.encode

local DATABASE = {
    [C.EPHD_DATABASE_NONE] = "none",
    [C.EPHD_DATABASE_CONNECTED] = "connected",
    [C.EPHD_DATABASE_UNAVAILABLE] = "unavailable",
}

local _M = {}

function _M.health(req)
    reply.json(req, 200, '{"status":"ok"}')
end

function _M.ready(req)
    local p = hooks.active
    local body = encode({
        ready = p ~= nil,
        policy = p and { name = p.name, version = p.version } or nil,
        database = DATABASE[C.ephd_ffi_database_state()],
    })
    reply.json(req, p and 200 or 503, body)
end

return _M
