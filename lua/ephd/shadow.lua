-- The shadow policy: a candidate judged beside the live one on every
-- request the ladder decides, after the live answer is written, so an
-- operator sees what it would change before it refuses anyone
-- (docs/policy.md, "Changing policy safely"). Its verdict (ephd.verdict)
-- runs with its own limits and rate buckets and never changes the answer,
-- the engine or the live policy's state; what it keeps is counts, bounded
-- whatever the traffic:
--
--   pairs    (live outcome, shadow outcome) -> requests, where an outcome
--            is "pass" or a code of ephd.codes: a closed set
--   tenants  the tenants with the most disagreements, by the space-saving
--            algorithm over TENANTS counters: a tenant holding more than
--            1/TENANTS of them is always listed, a count is over by at
--            most the smallest counter, and new tenant ids only take over
--            the smallest counter, never add one
--   samples  the last SAMPLES disagreeing requests: route, tenant, the two
--            outcomes, the rung that decided, when (never a payload or a
--            credential)
--
-- By default it judges the family's routes (/api/v1/ephemeral/...) alone:
-- the system routes are the operator's own reads, a dashboard's and `ephd
-- status`'s polling among them, which would crowd the counts of what a
-- candidate changes for tenants. Loaded with {"routes": "all"}, it judges
-- every route the ladder decides.
--
-- A shadow hook that raises, overruns the budget or returns what the
-- contract refuses disables the shadow, with one log line; the live path
-- never sees it.
local cjson = require("cjson.safe")
local ffi = require("ffi")
local browser = require("ephd.browser")
local codes = require("ephd.codes")
local core = require("ephd.core")
local grants = require("ephd.grants")
local hooks = require("ephd.hooks")
local killswitch = require("ephd.killswitch")
local limits = require("ephd.limits")
local log = require("ephd.log")
local metering = require("ephd.metering")
local tenancy = require("ephd.tenancy")
local verdict = require("ephd.verdict")

local C = core.C
local config = core.config
local encode = cjson.encode
local ffi_string = ffi.string
local floor, pcall = math.floor, pcall

local _M = {}

_M.TENANTS = 64 -- counters of the tenant table
_M.TOP = 20     -- tenants shown
_M.SAMPLES = 50 -- disagreeing requests kept

-- The outcomes, "pass" first, each with its index.
local OUTCOMES = { "pass" }
for _, c in ipairs(codes.CODES) do OUTCOMES[#OUTCOMES + 1] = c.code end
local INDEX = {}
for i, o in ipairs(OUTCOMES) do INDEX[o] = i end
local N = #OUTCOMES

-- The shadow loaded, or nil.
_M.current = nil
-- Shadows disabled by a failing hook since the broker started.
_M.disabled_total = 0

local function wall_ms()
    return floor(C.ephd_ffi_wall_time() * 1000)
end

-- The tenant's footprint, in a table made once: the verdict reads it at
-- once and keeps nothing. The shadow judges a request after the live
-- answer, so a push the live ladder passed is in the footprint already:
-- its payload (`served`) is taken off, or the candidate would count it
-- twice and refuse, at its allowance, a push that fits.
local held = { bytes = 0 }
local served = 0

local function footprint(tenant)
    local bytes = metering.bytes(tenant)
    if not bytes then return nil end
    held.bytes = bytes - served
    return held
end

-- What the verdict reads of the broker: the live grants, knobs and kill
-- switch (the broker's, not a policy's), the tenant's footprint; its
-- hooks called the one way any policy's are, under the same budget.
local ENV = {
    grant = grants.get,
    require_grant = config.require_grant ~= 0,
    defaults = limits.defaults,
    tenancy_header = config.tenancy_header ~= 0,
    call = hooks.run,
    paused = killswitch.paused,
    counters = footprint,
}

-- The routes the shadow being loaded will judge ("family" or "all"), set
-- by the load route as C starts reading its files: loads run one at a
-- time, and one from --shadow-policy judges the family's.
_M.loading_routes = nil

-- Starts judging with policy p (what ephd.policy.load returned), read from
-- dir; a shadow in place is replaced, its counts with it.
function _M.start(p, dir)
    local routes = _M.loading_routes or "family"
    _M.loading_routes = nil
    _M.current = {
        p = p, dir = dir, since = wall_ms(), judge = verdict.new(p, ENV),
        all_routes = routes == "all", routes = routes,
        state = "running", disabled = nil,
        decisions = 0, disagreements = 0, pairs = {},
        tenants = { n = 0, slot = {}, tenant = {}, count = {} },
        samples = {}, next_sample = 1,
    }
    return _M.current
end

function _M.stop()
    _M.current = nil
end

-- The grants changed: the shadow's limits are asked again, as the live.
function _M.forget()
    local s = _M.current
    if s then s.judge:forget() end
end

local function disable(s, err)
    local hook, why = verdict.failure(err)
    hook = hook or "ephd.verdict"
    why = log.excerpt(why)
    s.state = "disabled"
    s.disabled = { hook = hook, error = why, at = wall_ms() }
    _M.disabled_total = _M.disabled_total + 1
    log.warn("policy_shadow_disabled", { hook = hook, error = why,
                                         name = s.p.name, dir = s.dir })
end

-- Space-saving: a tenant counted, in a table that never grows past
-- TENANTS.
local function count_tenant(t, tenant)
    local slot = t.slot[tenant]
    if not slot then
        if t.n < _M.TENANTS then
            t.n = t.n + 1
            slot = t.n
            t.count[slot] = 0
        else
            -- The smallest counter's tenant makes way; its count stays,
            -- the bound on how far over the newcomer's count may be.
            slot = 1
            local count = t.count
            for i = 2, t.n do
                if count[i] < count[slot] then slot = i end
            end
            t.slot[t.tenant[slot]] = nil
        end
        t.tenant[slot] = tenant
        t.slot[tenant] = slot
    end
    t.count[slot] = t.count[slot] + 1
end

local function record(s, live, shadow, rung, route, tenant)
    s.decisions = s.decisions + 1
    local k = (INDEX[live] - 1) * N + INDEX[shadow]
    s.pairs[k] = (s.pairs[k] or 0) + 1
    if live == shadow then return end
    s.disagreements = s.disagreements + 1
    if tenant then count_tenant(s.tenants, tenant) end
    -- The ring's tables are made once and written over.
    local i = s.next_sample
    local sample = s.samples[i]
    if not sample then
        sample = {}
        s.samples[i] = sample
    end
    sample.at, sample.route, sample.tenant = wall_ms(), route,
                                             tenant or cjson.null
    sample.live, sample.shadow, sample.rung = live, shadow, rung
    s.next_sample = i % _M.SAMPLES + 1
end

-- The engine's refusals at commit that the ladder checks before the
-- tenant's bytes (ephd.ladder's ORDER: the parked slots at the rate rung,
-- then the queue's bounds).
local OUTER_THAN_BUDGET = { rate_limited = true, queue_full = true }

-- What the verdict is asked about: the request as the live ladder saw it
-- (a route's method, but for a GET route's HEAD, and the path of a route
-- without a parameter are its row's: no string made per request).
local function request_of(ctx)
    local req, seen, route = ctx.req, ctx.request, ctx.route
    return {
        route = route.name,
        method = seen and seen.method
                 or (req.method.len == #route.method and route.method
                     or ffi_string(req.method.ptr, req.method.len)), -- HEAD
        path = seen and seen.path
               or (route.param and ffi_string(req.path.ptr, req.path.len)
                   or route.path),
        authorization = seen and seen.authorization
                        or ffi_string(req.authorization.ptr,
                                      req.authorization.len),
        tenant = tenancy.tenant(req),
        messages = ctx.messages or nil, bytes = ctx.bytes or nil,
        queue = ctx.queue or nil, partition = ctx.partition or nil,
        group = ctx.group or nil,
    }
end

-- Judges ctx, which the live ladder decided (ctx.code and ctx.rung: what
-- it refused with and where, false when it passed), with shadow s, if it
-- is on a route s judges. A request relayed by a member of the cell was
-- judged at its edge and is not judged again.
function _M.observe(ctx, s)
    if s.state ~= "running" or ctx.forwarded
       or not (ctx.family or s.all_routes) then
        return
    end
    local live, at = ctx.code or "pass", ctx.rung
    local shadow, rung
    local r
    if at == "authenticate" and browser.foreign(ctx.req) then
        -- A browser's forgery is the broker's refusal, any policy's.
        shadow, rung = live, "broker"
    else
        r = request_of(ctx)
        if at == "shape" then
            -- Refused for its shape, which the ladder checks before the
            -- rate: no candidate's cost, rate or bytes is asked about a
            -- malformed push, as no live one was (its queue may be no
            -- name at all).
            r.messages, r.bytes = nil, nil
        end
        if live == "pass" and r.bytes then
            served, r.fits = r.bytes, ctx.limits and ctx.limits.max_bytes
        else
            served = 0
        end
        local ok, code, decided = pcall(s.judge.decide, s.judge, r,
                                        tonumber(C.ephd_ffi_now_ms()))
        if not ok then return disable(s, code) end
        if code and decided == "budget" and at == "commit"
           and OUTER_THAN_BUDGET[live] then
            -- The engine refused at a rung outside the tenant's bytes
            -- (the queue's bounds, the parked slots): the candidate's
            -- estimate of its bytes comes after, so its answer is the
            -- live one.
            shadow, rung = live, at
        elseif code then
            shadow, rung = code, decided
        elseif at == "shape" or at == "commit" then
            -- Refused after the policy's rungs, by the request's shape or
            -- the engine: so would the candidate's be.
            s.judge:undo()
            shadow, rung = live, at
        else
            shadow = "pass"
        end
    end
    if live ~= shadow and not rung then rung = "live:" .. at end
    record(s, live, shadow, rung, ctx.route.name,
           ctx.tenant or (r and r.tenant) or nil)
end

-- GET /api/v1/system/policy/shadow's body.
local function list(items)
    if #items == 0 then return "[]" end
    return encode(items)
end

local function pairs_list(s)
    local out = {}
    for k, n in pairs(s.pairs) do
        local live = OUTCOMES[floor((k - 1) / N) + 1]
        local shadow = OUTCOMES[(k - 1) % N + 1]
        out[#out + 1] = { live = live, shadow = shadow, count = n }
    end
    -- Disagreements first, then by count, most first.
    table.sort(out, function(a, b)
        local da, db = a.live ~= a.shadow, b.live ~= b.shadow
        if da ~= db then return da end
        if a.count ~= b.count then return a.count > b.count end
        return a.live .. a.shadow < b.live .. b.shadow
    end)
    return out
end

local function tenants_list(s)
    local t, out = s.tenants, {}
    for i = 1, t.n do
        out[i] = { tenant = t.tenant[i], disagreements = t.count[i] }
    end
    table.sort(out, function(a, b)
        if a.disagreements ~= b.disagreements then
            return a.disagreements > b.disagreements
        end
        return a.tenant < b.tenant
    end)
    for i = _M.TOP + 1, #out do out[i] = nil end
    return out
end

local function samples_list(s)
    local out, n = {}, _M.SAMPLES
    for i = 1, n do
        local sample = s.samples[(s.next_sample - i - 1) % n + 1]
        if not sample then break end
        out[i] = sample
    end
    return out
end

-- The shadow as data (the GET's "shadow" member), or nil.
function _M.report()
    local s = _M.current
    if not s then return nil end
    return {
        name = s.p.name, version = s.p.version, dir = s.dir, since = s.since,
        routes = s.routes, state = s.state, disabled = s.disabled,
        decisions = s.decisions, disagreements = s.disagreements,
        pairs = pairs_list(s), tenants = tenants_list(s),
        samples = samples_list(s),
    }
end

function _M.body()
    local r = _M.report()
    if not r then return '{"shadow":null}' end
    local head = encode({ name = r.name, version = r.version, dir = r.dir,
                          since = r.since, routes = r.routes, state = r.state,
                          disabled = r.disabled or cjson.null,
                          decisions = r.decisions,
                          disagreements = r.disagreements })
    return '{"shadow":' .. head:sub(1, -2) .. ',"pairs":' .. list(r.pairs)
           .. ',"tenants":' .. list(r.tenants) .. ',"samples":'
           .. list(r.samples) .. '}}'
end

-- /metrics (ephd.handlers.metrics): the pairs seen since the shadow
-- loaded, agreements too (none without a shadow); disabled_total counts
-- the shadows disabled since the broker started.
function _M.decisions()
    local s = _M.current
    return s and pairs_list(s) or {}
end

return _M
