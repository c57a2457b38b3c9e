-- `ephd policy replay`: a policy directory asked about logged traffic,
-- with no broker and no database. The broker's own log is read back (the
-- `request` lines of QUEEN_EPHEMERAL_LOG_REQUESTS, the boot block's
-- settings; every other line is skipped), each request goes through the
-- candidate's rungs (ephd.verdict) with the logged time as its clock, so
-- its rate buckets refill as they would have, and what it would have
-- answered differently is counted. Pure Lua: the CLI's plain LuaJIT.
--
-- What a log cannot say, and what replay does about it:
--   credentials are never logged: a candidate with an authenticate hook of
--     its own is given the identity the live broker established (a request
--     refused before there was one keeps its live answer); a candidate
--     without one establishes it as the broker would, from the tenant read;
--   grants: those given (--grants, `ephd grant list --json`'s answer), or
--     none;
--   the engine's answers (a request's shape, queue_full, the allowances
--     checked at commit, a parked pop's slots) are the live broker's and
--     stand, unless the candidate refuses first;
--   the kill switch is followed as its `surface_switched` lines set it
--     (in memory: a restart lifts it), ahead of every rung, as live;
--   a request relayed by a member of the cell is replayed where the edge
--     logged it, not again at its owner.
local columns = require("ephd.columns")
local contract = require("ephd.contract")
local routes = require("ephd.routes")
local verdict = require("ephd.verdict")

local byte, concat, find, format, sub = string.byte, table.concat,
                                        string.find, string.format, string.sub
local floor = math.floor

local _M = {}

_M.CANNOT = {
    "credentials are not logged: a candidate with its own authenticate "
    .. "hook is given the identity the live broker established (a request "
    .. "refused before one was keeps its live answer); without one, the "
    .. "candidate establishes it from the tenant read, as the broker would",
    "grants are the --grants file's, or none",
    "the engine's answers (shape, queue_full, allowances at commit, parked "
    .. "slots) stand as logged unless the candidate refuses first; its byte "
    .. "budget is not estimated",
    "a request relayed in a cell is replayed at the edge that logged it",
}

-- Log lines -------------------------------------------------------------

-- The fields of a logfmt line from its ts on (a prefix such as journald's
-- is skipped), values unquoted; nil when it has none or is cut short.
function _M.fields(text)
    local i = find(text, "ts=", 1, true)
    if not i then return nil end
    local t, n = {}, #text
    while i <= n do
        local k, j = text:match("^([%w_]+)=()", i)
        if not k then return nil end
        local v
        if byte(text, j) == 34 then -- a quoted value: \" \\ \n
            local buf, p = {}, j + 1
            while true do
                local c = byte(text, p)
                if not c then return nil end
                if c == 92 then
                    local e = sub(text, p + 1, p + 1)
                    buf[#buf + 1] = e == "n" and "\n" or e
                    p = p + 2
                elseif c == 34 then
                    p = p + 1
                    break
                else
                    buf[#buf + 1] = sub(text, p, p)
                    p = p + 1
                end
            end
            v, i = concat(buf), p
        else
            local e = find(text, " ", j, true) or n + 1
            v, i = sub(text, j, e - 1), e
        end
        t[k] = v
        i = find(text, "[^ ]", i) or n + 1
    end
    return t
end

-- Days since 1970-01-01 of a proleptic Gregorian date (no time zone: the
-- log's stamps are UTC).
local function days(y, m, d)
    y = m <= 2 and y - 1 or y
    local era = floor(y / 400)
    local yoe = y - era * 400
    local doy = floor((153 * (m + (m > 2 and -3 or 9)) + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end

-- A log stamp (2026-12-03T17:36:09.541Z) in milliseconds since the epoch.
function _M.ms(ts)
    local y, mo, d, h, mi, s, ms = tostring(ts):match(
        "^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.(%d%d%d)Z$")
    if not y then return nil end
    return ((days(tonumber(y), tonumber(mo), tonumber(d)) * 24 + tonumber(h))
            * 60 + tonumber(mi)) * 60000 + tonumber(s) * 1000 + tonumber(ms)
end

local NUMBERS = { messages = true, bytes = true, status = true }

local function count(text)
    local n = text:match("^%d+$") and tonumber(text)
    return n and n < 2^53 and n or nil
end

local ROUTE = {}
for _, r in ipairs(routes) do ROUTE[r.name] = true end

-- A `request` line as a record {at (ms), route, code, status, fields}; nil
-- for any other line, and for one naming no route of the broker's (not a
-- line it wrote: asked about it, the verdict would raise, and the replay
-- would stop there blaming the candidate).
function _M.parse(text)
    local t = _M.fields(text)
    if not t or t.event ~= "request" or not ROUTE[t.route] or not t.code then
        return nil
    end
    local at = _M.ms(t.ts)
    if not at then return nil end
    t.ts, t.level, t.event = nil, nil, nil
    -- The broker writes these as counts; a line with anything else
    -- (messages=-100000 gave a tenant tokens) is not one it wrote.
    for k in pairs(NUMBERS) do
        if t[k] ~= nil then
            local n = count(t[k])
            if not n then return nil end
            t[k] = n
        end
    end
    if t.forwarded then t.forwarded = t.forwarded == "true" end
    return { at = at, route = t.route, code = t.code, status = t.status,
             fields = t }
end

-- The replay -------------------------------------------------------------

-- The broker's defaults for the knobs a policy sees, overridden by the
-- boot block's `setting` lines as they are read.
local DEFAULTS = {
    QUEEN_EPHEMERAL_RATE = "5000", QUEEN_EPHEMERAL_BURST = "10000",
    QUEEN_EPHEMERAL_MAX_PARKED = "100000",
    QUEEN_EPHEMERAL_TENANT_MAX_QUEUES = "100000",
    QUEEN_TENANCY_HEADER = "false",
}

-- The rung a live refusal came from, by its code, for a line that does
-- not name it.
local RUNG_OF = {
    ephemeral_disabled = "paused", unauthorized = "authenticate",
    forbidden = "authenticate", feature_gated = "grant",
    ephemeral_bad_request = "shape", rate_limited = "rate",
}

-- The live ladder's rungs that are the policy's: a request refused there
-- and passed by the candidate would have been served.
local POLICY_RUNG = { paused = true, authenticate = true, grant = true,
                      admit = true, rate = true }

-- A hook's instruction budget offline: a hook that loops stops the
-- replay with its name rather than holding it for good.
_M.BUDGET = 10000000

local function budgeted_call(p, hook, ...)
    debug.sethook(function()
        debug.sethook()
        error("ran past its budget of " .. _M.BUDGET .. " instructions", 2)
    end, "", _M.BUDGET)
    local ok, a, b, c = pcall(p.hooks[hook], ...)
    debug.sethook()
    return ok, a, b, c
end

local Replay = {}
Replay.__index = Replay

-- p: what ephd.policy.load returns; opts.grants: tenant -> a grant row
-- (contract.grant); opts.require_grant: the grants' own say, when the log
-- has no setting for it; opts.first: how many differences to keep.
function _M.new(p, opts)
    opts = opts or {}
    local self = setmetatable({
        p = p, grants = opts.grants or {}, settings = {},
        require_grant = opts.require_grant, first = opts.first or 20,
        read = 0, requests = 0, relayed = 0, kept = 0, differ = 0,
        pairs = {}, tenants = {}, samples = {}, boots = 0,
    }, Replay)
    local settings = self.settings
    local function setting(name)
        return settings[name] or DEFAULTS[name]
    end
    self.env = {
        grant = function(tenant) return self.grants[tenant] end,
        defaults = function()
            return contract.defaults(
                tonumber(setting("QUEEN_EPHEMERAL_RATE")),
                tonumber(setting("QUEEN_EPHEMERAL_BURST")),
                tonumber(setting("QUEEN_EPHEMERAL_MAX_PARKED")),
                tonumber(setting("QUEEN_EPHEMERAL_TENANT_MAX_QUEUES")))
        end,
        call = budgeted_call,
        -- The kill switch's reason while the log has it off.
        paused = function() return self.switched_off end,
    }
    self:boot()
    return self
end

-- A broker (re)started: the candidate's buckets and limits start afresh,
-- as the live ones did, under the settings read since.
function Replay:boot()
    self.switched_off = nil
    local s = self.settings
    local tenancy = (s.QUEEN_TENANCY_HEADER or "false") == "true"
    local require_grant = s.QUEEN_EPHEMERAL_REQUIRE_GRANT
    if require_grant then
        require_grant = require_grant == "true"
    elseif self.require_grant ~= nil then
        require_grant = self.require_grant
    else
        require_grant = tenancy
    end
    self.env.tenancy_header, self.env.require_grant = tenancy, require_grant
    self.judge = verdict.new(self.p, self.env)
end

-- What the candidate answers a logged request: its code, and the rung
-- and message when it refused; "kept" as the second value when the log
-- cannot tell and the live answer stands.
function Replay:answer(rec)
    local f = rec.fields
    local live = rec.code
    local lrung = live ~= "pass" and (f.rung or RUNG_OF[live] or "commit")
                  or nil
    local identity
    if self.p.hooks.authenticate then
        if not f.identity then return live, "kept" end
        identity = { tenant = f.identity, level = f.access }
    end
    -- A browser's forgery or a bad forward mark: the broker's, not the
    -- policy's, and refused before anyone was established.
    if lrung == "authenticate" and live == "forbidden" and not f.identity then
        return live, "kept"
    end
    local code, rung, message = self.judge:decide({
        route = rec.route, method = f.method, path = f.path,
        tenant = f.tenant, identity = identity,
        -- A push refused for its shape never reached the rate.
        messages = lrung ~= "shape" and f.messages or nil,
        bytes = f.bytes, queue = f.queue, partition = f.partition,
        group = f.group,
    }, rec.at)
    if code then return code, rung, message end
    if lrung and POLICY_RUNG[lrung] then return "pass" end
    -- Refused after the policy's rungs: as the live ladder refunds, the
    -- candidate gives back what it took.
    if live ~= "pass" then self.judge:undo() end
    return live
end

-- Reads one line of the log.
function Replay:line(text)
    self.read = self.read + 1
    local rec = _M.parse(text)
    if not rec then
        local t = find(text, "event=", 1, true) and _M.fields(text)
        if t and t.event == "setting" and t.name then
            self.settings[t.name] = t.value
        elseif t and t.event == "listening" then
            self.boots = self.boots + 1
            self:boot()
        elseif t and t.event == "surface_switched" then
            self.switched_off = t.enabled == "false"
                                and (t.reason or "paused") or nil
        end
        return
    end
    self:request(rec)
end

-- Replays one request record; raises what ephd.verdict raises when one of
-- the candidate's hooks fails.
function Replay:request(rec)
    if rec.fields.forwarded then
        self.relayed = self.relayed + 1
        return
    end
    self.now_s = rec.at / 1000
    self.requests = self.requests + 1
    local code, rung, message = self:answer(rec)
    if rung == "kept" then
        self.kept = self.kept + 1
        return
    end
    if code == rec.code then return end
    self.differ = self.differ + 1
    local key = rec.code .. "\0" .. code
    self.pairs[key] = (self.pairs[key] or 0) + 1
    local tenant = rec.fields.identity or rec.fields.tenant or "-"
    self.tenants[tenant] = (self.tenants[tenant] or 0) + 1
    if #self.samples < self.first then
        self.samples[#self.samples + 1] = {
            at = rec.at, route = rec.route, tenant = tenant, live = rec.code,
            replayed = code, rung = rung, message = message,
        }
    end
end

-- The policy's clock (ephd.now() in its code): the request's logged time.
function Replay:now()
    return self.now_s or 0
end

-- The differences as sorted lists: pairs {live, replayed, count} and
-- tenants {tenant, count}, most first.
function Replay:summary()
    local ps, ts = {}, {}
    for key, n in pairs(self.pairs) do
        local live, replayed = key:match("^(.-)%z(.*)$")
        ps[#ps + 1] = { live = live, replayed = replayed, count = n }
    end
    table.sort(ps, function(a, b)
        if a.count ~= b.count then return a.count > b.count end
        return a.live .. a.replayed < b.live .. b.replayed
    end)
    for tenant, n in pairs(self.tenants) do
        ts[#ts + 1] = { tenant = tenant, count = n }
    end
    table.sort(ts, function(a, b)
        if a.count ~= b.count then return a.count > b.count end
        return a.tenant < b.tenant
    end)
    return ps, ts
end

-- Report -----------------------------------------------------------------

local function stamp(ms)
    local s = floor(ms / 1000)
    return os.date("!%Y-%m-%dT%H:%M:%S", s) .. format(".%03dZ", ms % 1000)
end

-- A paragraph as lines of at most width, each after lead (the first
-- after first).
local function wrap(out, text, first, lead, width)
    local line = first
    for word in text:gmatch("%S+") do
        if #line + #word + 1 > width and line ~= first and line ~= lead then
            out:write(line, "\n")
            line = lead
        end
        line = (line == first or line == lead) and line .. word
               or line .. " " .. word
    end
    out:write(line, "\n")
end

-- Writes what a person reads: what was replayed and what it cannot be,
-- then the differences by pair, by tenant (top `top`) and the first ones.
function Replay:report(out, header, top)
    out:write(header, "\n")
    out:write("cannot replay:\n")
    for _, why in ipairs(_M.CANNOT) do wrap(out, why, "  - ", "    ", 76) end
    wrap(out, format("%d request%s replayed (%d kept as logged, %d relayed "
                     .. "at their owner skipped, %d broker start%s); %d "
                     .. "answered differently", self.requests,
                     self.requests == 1 and "" or "s", self.kept,
                     self.relayed, self.boots, self.boots == 1 and "" or "s",
                     self.differ), "", "", 76)
    if self.differ == 0 then return end
    local ps, ts = self:summary()
    out:write("\nlive -> replayed:\n")
    local rows = { { "LIVE", "REPLAYED", "COUNT" } }
    for _, p in ipairs(ps) do
        rows[#rows + 1] = { p.live, p.replayed, tostring(p.count) }
    end
    columns(out, rows, "  ")
    out:write("\ntop tenants:\n")
    rows = { { "TENANT", "DIFFERENCES" } }
    for i = 1, math.min(#ts, top or 10) do
        rows[#rows + 1] = { ts[i].tenant, tostring(ts[i].count) }
    end
    columns(out, rows, "  ")
    out:write(format("\nfirst %d difference%s:\n", #self.samples,
                     #self.samples == 1 and "" or "s"))
    rows = { { "TIME", "ROUTE", "TENANT", "LIVE", "REPLAYED", "RUNG" } }
    for _, s in ipairs(self.samples) do
        rows[#rows + 1] = { stamp(s.at), s.route, s.tenant, s.live,
                            s.replayed, s.rung or "-" }
    end
    columns(out, rows, "  ")
end

return _M
