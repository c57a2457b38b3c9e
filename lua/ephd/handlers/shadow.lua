-- The shadow policy's routes (admin, docs/wire.md): load a candidate
-- beside the live policy, see what it would change, remove it, or promote
-- it to be the live policy (ephd.shadow).
local cjson = require("cjson.safe")
local core = require("ephd.core")
local body = require("ephd.body")
local ladder = require("ephd.ladder")
local limits = require("ephd.limits")
local log = require("ephd.log")
local reply = require("ephd.reply")
local shadow = require("ephd.shadow")
local validate = require("ephd.validate")

local C = core.C

local _M = {}

local no_query = validate.no_query

-- GET /api/v1/system/policy/shadow
_M.show = {
    parse = no_query,
    commit = function(ctx)
        reply.json(ctx.req, 200, shadow.body())
        return 0
    end,
}

local LOAD_FIELDS = { dir = true, routes = true }
local ROUTES = { family = true, all = true }
-- PATH_MAX, less room for a file's name under it.
local MAX_DIR = 3800

-- POST /api/v1/system/policy/shadow {"dir": "/abs/path", "routes":
-- "family"|"all"}: C reads the files off the loop and answers once the
-- candidate is in, or refused (400, as a reload: the shadow in place, if
-- any, stays). routes: what it judges, the family's routes by default.
_M.load = {
    parse = function(ctx)
        local why = no_query(ctx)
        if why then return why end
        local obj, err = body.object(ctx.req, LOAD_FIELDS)
        if not obj then return err end
        local dir = obj.dir
        if type(dir) ~= "string" or dir:sub(1, 1) ~= "/" or #dir > MAX_DIR
                or dir:find("%z") then
            return "dir must be an absolute path of at most " .. MAX_DIR
                   .. " bytes"
        end
        if obj.routes ~= nil and not ROUTES[obj.routes] then
            return 'routes must be "family" or "all"'
        end
        ctx.args = { dir = dir, routes = obj.routes or "family" }
    end,
    commit = function(ctx)
        local dir = ctx.args.dir
        if C.ephd_ffi_policy_shadow(ctx.req, dir, #dir)
                == C.EPHD_E_UNAVAILABLE then
            return 0, "ephemeral_unavailable",
                   "a policy load or reload is already running"
        end
        shadow.loading_routes = ctx.args.routes
        return 0
    end,
}

-- DELETE /api/v1/system/policy/shadow: nothing shadows from now on (also
-- when nothing did).
_M.remove = {
    parse = no_query,
    commit = function(ctx)
        local s = shadow.current
        if s then
            shadow.stop()
            C.ephd_ffi_policy_shadow_drop()
            log.info("policy_shadow_removed", { name = s.p.name,
                                                dir = s.dir })
        end
        reply.json(ctx.req, 200, '{"shadow":null}')
        return 0
    end,
}

-- POST /api/v1/system/policy/promote: the shadow becomes the live policy
-- in one step, as a reload swaps (the limits the old one decided are
-- forgotten, rate buckets are kept), and later reloads read its
-- directory. A disabled shadow is refused: it failed on real traffic.
_M.promote = {
    parse = no_query,
    commit = function(ctx)
        local s = shadow.current
        if not s then
            return 0, "ephemeral_bad_request", "no shadow policy is loaded"
        end
        if s.state ~= "running" then
            return 0, "ephemeral_bad_request",
                   "the shadow policy is disabled (its " .. s.disabled.hook
                   .. " hook failed: " .. s.disabled.error
                   .. "): load it again once fixed"
        end
        if C.ephd_ffi_policy_promote() ~= C.EPHD_OK then
            return 0, "ephemeral_unavailable",
                   "a policy load or reload is running: promote once it "
                   .. "is done"
        end
        s.p.candidate = nil -- the live policy's whole memory cap from now on
        ladder.use(s.p)
        limits.forget()
        shadow.stop()
        log.info("policy_promoted", { name = s.p.name, version = s.p.version,
                                      dir = s.dir })
        reply.json(ctx.req, 200, cjson.encode({
            promoted = true,
            policy = { name = s.p.name, version = s.p.version, dir = s.dir },
        }))
        return 0
    end,
}

return _M
