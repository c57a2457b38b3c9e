-- The policy in force and the one way to call its hooks: guarded, counted,
-- and logged at most once a second per hook, so a broken hook costs a 503
-- and a counter, never the broker.
local core = require("ephd.core")

local C = core.C
local pcall = pcall

local _M = {}

_M.active = nil
_M.failures = {} -- hook name -> count
_M.reloads = { ok = 0, refused = 0 }

local last_logged = {}

local function failed(name, err)
    _M.failures[name] = (_M.failures[name] or 0) + 1
    local now = tonumber(C.ephd_ffi_now_ms())
    if not last_logged[name] or now - last_logged[name] >= 1000 then
        last_logged[name] = now
        local log = require("ephd.log")
        log.warn("policy_hook_failed", {
            hook = name, count = _M.failures[name], error = log.excerpt(err) })
    end
end

-- Calls policy p's hook: true and its results, or false and the error when
-- it raised or ran past its time budget (an operator's hook runs bracketed
-- by the watchdog's budget). A hook p lacks answers true and nothing. The
-- one way any policy's hook is called: the live one's below, a shadow's
-- by ephd.shadow.
function _M.run(p, name, ...)
    local hook = p.hooks[name]
    if not hook then return true end
    if not p.guarded[name] then return pcall(hook, ...) end
    C.ephd_ffi_policy_enter(p.candidate and 1 or 0)
    local ok, a, b, c = pcall(hook, ...)
    C.ephd_ffi_policy_leave()
    return ok, a, b, c
end

local run = _M.run

-- The policy in force's hook: true and its results, or false when it
-- raised or ran past its time budget (logged and counted).
function _M.call(name, ...)
    local ok, a, b, c = run(_M.active, name, ...)
    if not ok then
        failed(name, a)
        return false
    end
    return true, a, b, c
end

-- For results that are the wrong shape: counted like a raise.
function _M.reject(name, why)
    failed(name, why)
end

return _M
