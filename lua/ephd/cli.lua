-- The commands of `ephd` that are not the broker: `ephd status` (the
-- tenant's queues as a table, once or like top), `ephd push`, `pop` and
-- `ack` (the verbs from a shell, for people used to redis-cli or nats),
-- `ephd grant set/list/rm` (the tenants' grants), `ephd policy test` (a
-- policy directory's busted specs with ephd.testing on the path), `ephd
-- policy shadow` (what a shadow policy would change) and `ephd policy
-- replay` (a policy asked about a broker's logged requests, ephd.replay).
-- `ephd policy check` stays in C: it loads
-- policy code the way the broker does, in the broker's sandbox.
local cjson = require("cjson.safe")
local ffi = require("ffi")
local socket = require("socket")
local client = require("ephd.client")
local write_columns = require("ephd.columns")

local concat, format, rep = table.concat, string.format, string.rep
local floor = math.floor

local _M = {}

local CONNECTION_USAGE = [[
--url URL defaults to $EPHD_URL, then http://127.0.0.1:6632; --tenant
sends x-queen-tenant, --token an Authorization: Bearer token.
]]

local USAGE = {
    status = [[
usage: ephd status [--url URL] [--tenant UUID] [--token TOKEN]
                   [--watch] [--interval SECONDS]

Prints every queue of the tenant (GET /api/v1/ephemeral/queues) as a
table: tier, depth, bytes, partitions, groups, pops parked and drops by
cause. Above it: which broker answered (its member id, advertised address
and epoch, the cell's live members and the partitions it owns of those it
holds: GET /api/v1/system/cell; without admin, the URL asked), the cell's
bytes against its ceiling, the kill switch and the policy in force (GET
/api/v1/system/ephemeral), and the tenant's pushed, delivered and parked
counts and rate limit (GET /api/v1/system/metering; the tenant is
--tenant, or the single tenant without --token). Those need admin. While
the surface is paused the listing is refused like every ephemeral route;
with admin the table comes from GET /api/v1/system/queues, which answers
paused too (and when the admin's own tenant has no grant), and without
it --watch keeps the last table. --watch redraws every --interval
seconds (1 by default), with push and pop rates, until interrupted or
its output is closed (exit 0: `ephd status --watch | head` ends); on a
terminal in place, elsewhere one frame after another with no escape
codes. Exits 1 when the broker does not answer, naming its URL.
]] .. CONNECTION_USAGE,
    push = [[
usage: ephd push QUEUE [--partition P] [--string] [--json] [MESSAGE...]

Pushes each MESSAGE to QUEUE, all in one request. A MESSAGE that is JSON
is sent as that JSON, byte for byte; anything else is sent as a JSON
string (--string sends every MESSAGE as a string, '123' included).
Without MESSAGE, each line of stdin is one (10,000 to a request).
Prints "pushed N", or with --json the broker's {"pushed": N}.
]] .. CONNECTION_USAGE,
    pop = [=[
usage: ephd pop QUEUE [--group G] [--partition P] [--batch N]
                      [--wait [SECONDS]] [--commit-on-delivery] [--json]

Pops up to N messages (1 by default) and prints one line per message:
id, partition, attempts and the payload's JSON as pushed, separated by
tabs (names hold no control characters, so `cut -f1` is the id). Nothing
there prints "(no messages)" on stderr. --wait parks until a message
arrives, for SECONDS or the broker's default; --commit-on-delivery
(--ack, its older name) settles at delivery (commitOnDelivery: no lease,
no ack to send); without it a group's messages are leased until
`ephd ack`. --json prints the broker's answer {"queue", "messages": [...]}
instead.
]=] .. CONNECTION_USAGE,
    ack = [[
usage: ephd ack QUEUE [--group G] [--status completed|failed|retry]
                      [--json] [ID...]

Settles popped messages by id, in the group they were popped in.
--status is what the wire calls an ack's status: completed (the
default), or failed and retry to have the message redelivered. Without
ID, each line of stdin is one, up to its first tab, so `ephd pop` pipes
into it. Prints one line per id: the id and its outcome, one of acked,
redelivered, stale (minted before a restart) or unknown (already acked
or redelivered). None is an error. --json prints {"results": [...]}.
]] .. CONNECTION_USAGE,
    grant = [[
usage: ephd grant list [--json]
       ephd grant set TENANT [--disabled] [--max-bytes N] [--max-queues N]
                             [--rate N] [--json]
       ephd grant rm TENANT

The tenants' grants (queen.ephemeral_quota), through the broker's admin
routes (/api/v1/system/grants), which apply a change before they answer:
it holds from the next request on, not from the next refresh. list
prints one line per grant and whether a tenant without one is refused
(QUEEN_EPHEMERAL_REQUIRE_GRANT). set writes the whole grant: --disabled
refuses the tenant (403 feature_gated); --max-bytes, --max-queues and
--rate (messages per second) bound it, and a limit left out is the
broker's default. rm removes it. --json prints the broker's answer.
]] .. CONNECTION_USAGE,
    policy_replay = [[
usage: ephd policy replay --policy DIR --log FILE [--grants FILE]
                          [--first N] [--top N]

Asks the policy in DIR about traffic a broker logged, with no broker and
no database: FILE is the broker's log (stderr) with
QUEEN_EPHEMERAL_LOG_REQUESTS=true, whose `request` lines are replayed in
order and every other line skipped but the boot block's settings (the
knobs a policy sees). Each request runs through DIR's hooks (paused,
authenticate, limits, admit, cost) with its logged time as the clock, so
rate buckets refill as they did. Prints what DIR would have answered
differently: counts by live code -> replayed code, the --top tenants (10)
and the first --first differences (20), after what a log cannot replay.
--grants FILE: the grants in force, as `ephd grant list --json` prints
them (none without it). Exits 0 whatever differs; 1 when DIR does not
load or one of its hooks fails, 2 when FILE cannot be read.
]],
    policy_shadow = [[
usage: ephd policy shadow [--url URL] [--token TOKEN] [--watch]
                          [--interval SECONDS]

Prints what the shadow policy (a candidate judged beside the live one:
POST /api/v1/system/policy/shadow, or --shadow-policy) would have
answered differently: requests judged and disagreements; a table of the
live policy's outcome against the shadow's (pass or a code), with
agreements (==) below disagreements (->); the tenants with the most
disagreements; and the last disagreeing requests (time, route, tenant,
the two outcomes, the rung that decided). From GET
/api/v1/system/policy/shadow, which needs admin. --watch re-prints every
--interval seconds (2 by default) until interrupted or its output is
closed, as `ephd status --watch` does. Exits 1 when the
broker does not answer, naming its URL.
]] .. CONNECTION_USAGE,
    policy_test = [[
usage: ephd policy test DIR [BUSTED ARGS...]

Runs the busted specs under DIR (files ending in _spec.lua) with LuaJIT,
with ephd.testing and the broker's modules on the Lua path and
EPHD_POLICY_DIR set to DIR, so a spec loads the policy with
require("ephd.testing").load() and drives its hooks without a broker.
Exits with busted's status.
]],
}

-- The whole text for --help (exit 0); on a mistake, the synopsis alone
-- (exit 2), after the line that says what was wrong.
local function usage(which, out)
    if out then
        out:write(USAGE[which])
        return 0
    end
    io.stderr:write(USAGE[which]:match("^(.-\n)\n"), "see ephd ",
                    (which:gsub("_", " ")), " --help\n")
    return 2
end

-- Options -----------------------------------------------------------------

-- spec: option -> "value" (--x V or --x=V), "flag", or "seconds?" (an
-- optional number: --wait, --wait 5, --wait=5). A negative number is an
-- argument (a payload), not an option; "--" ends the options.
local function parse(args, first, spec)
    local opts, rest = {}, {}
    local i = first
    while i <= #args do
        local a = args[i]
        local name, inline = a:match("^(%-%-[^=]+)=(.*)$")
        name = name or a
        local kind = spec[name]
        local key = name:sub(3):gsub("%-", "_")
        if a == "--help" or a == "-h" then
            opts.help = true
        elseif a == "--" then
            for j = i + 1, #args do rest[#rest + 1] = args[j] end
            break
        elseif kind == "flag" then
            if inline then return nil, name .. " takes no value" end
            opts[key] = true
        elseif kind == "value" then
            local v = inline
            if not v then
                i = i + 1
                v = args[i]
                -- The next option, not a value: --x=--y gives that one.
                if v and v:sub(1, 2) == "--" then v = nil end
            end
            if v == nil then return nil, name .. " needs a value" end
            opts[key] = v
        elseif kind == "seconds?" then
            local v = inline
            if not v and tonumber(args[i + 1]) then
                i = i + 1
                v = args[i]
            end
            opts[key] = v or true
        elseif a:sub(1, 1) == "-" and #a > 1 and not tonumber(a) then
            return nil, "unknown option " .. a
        else
            rest[#rest + 1] = a
        end
        i = i + 1
    end
    return opts, rest
end

local function with_connection(spec)
    spec["--url"], spec["--tenant"], spec["--token"] = "value", "value",
                                                       "value"
    return spec
end

-- The client, or nil after saying why (a URL it cannot use).
local function connect(command, opts)
    local ok, c = pcall(client.new, { url = opts.url, tenant = opts.tenant,
                                      token = opts.token })
    if ok then return c end
    io.stderr:write("ephd ", command, ": ",
                    (tostring(c):gsub("^[^:]*:%d+: ", "")), "\n")
end

-- One line for an error: what the broker said, where, and when to retry.
local function failure(command, c, err)
    -- A connection failure's message names the URL already.
    local text = err.message .. " (" .. err.code .. ")"
    if err.status then
        text = format("%s answered %s (%d): %s", c.url, err.code, err.status,
                      tostring(err.message))
        if client.retryable(err) then
            text = text .. "; retry in " .. err.retry_after .. " s"
        end
    end
    io.stderr:write("ephd ", command, ": ", text, "\n")
    return 1
end

-- ephd status -------------------------------------------------------------

-- The broker's tenant when tenancy headers are off (ephd.tenancy.DEFAULT;
-- that module needs the broker's FFI, which this plain state has not).
local DEFAULT_TENANT = "00000000-0000-0000-0000-000000000001"

local function human_bytes(n)
    if n < 1024 then return format("%d B", n) end
    local units = { "KiB", "MiB", "GiB", "TiB" }
    local u = 0
    repeat
        n = n / 1024
        u = u + 1
    until n < 1024 or u == #units
    return format("%.1f %s", n, units[u])
end

local COLUMNS = { "QUEUE", "TIER", "DEPTH", "BYTES", "PARTS", "GROUPS",
                  "PARKED", "DROPS b/t/r" }

-- The queue table as lines, widest cell per column, numbers
-- right-aligned.
local function table_lines(listing)
    local rows = {}
    for _, q in ipairs(listing.queues) do
        local d = q.drops
        rows[#rows + 1] = {
            q.queue, q.tier, tostring(q.depth), human_bytes(q.bytes),
            tostring(q.partitions), tostring(q.groups),
            tostring(q.parked or 0),
            format("%d/%d/%d", d.bounds, d.ttl, d.retry),
        }
    end
    table.sort(rows, function(a, b) return a[1] < b[1] end)
    local widths = {}
    for c, title in ipairs(COLUMNS) do
        widths[c] = #title
        for _, r in ipairs(rows) do
            if #r[c] > widths[c] then widths[c] = #r[c] end
        end
    end
    local function line(cells)
        local out = {}
        for c, v in ipairs(cells) do
            local pad = rep(" ", widths[c] - #v)
            out[c] = (c == 1 or c == 2) and v .. pad or pad .. v
        end
        return (concat(out, "  "):gsub("%s+$", ""))
    end
    local lines = { line(COLUMNS) }
    for _, r in ipairs(rows) do lines[#lines + 1] = line(r) end
    if #rows == 0 then lines[#lines + 1] = "(no queues)" end
    return lines
end

local function clock(t)
    return os.date("%H:%M:%S", floor(t))
end

-- The kill switch in words: from the system route (admin), else from the
-- listing's own refusal, which says paused without saying since when.
local function surface(frame)
    local s, err = frame.system, frame.err
    if s then
        if s.enabled then return "enabled" end
        return format("PAUSED%s (since %s, retry after %d s)",
                      s.reason and (": " .. s.reason) or "",
                      s.since and clock(s.since) or "?", s.retryAfter)
    end
    if err and err.code == "ephemeral_disabled" then
        return format("PAUSED: %s (retry after %d s)", err.message,
                      err.retry_after)
    end
    return "unknown (needs admin)"
end

-- A frame: {listing, err, system, counters, at}; shown, the listing of
-- an earlier frame when this one was refused for the pause (watch mode),
-- and the previous frame's counters for rates.
-- Which broker answered: in a cell, each one shows its own copy.
local function broker(frame)
    local v = frame.cell
    if not v then
        return format("broker %s (its id needs admin)", frame.url or "?")
    end
    return format("broker %s at %s epoch %s  cell %d live, owns %d of %d "
                  .. "partitions held%s", v.self.id, v.self.address,
                  v.self.epoch, v.live, v.partitions.owned,
                  v.partitions.held, v.fresh and "" or " (view stale)")
end

function _M.render(frame, shown, previous)
    local listing = frame.listing or shown
    local head = {}
    if listing then
        head[1] = format("%d queue%s", listing.count,
                         listing.count == 1 and "" or "s")
        -- cellBytes is the answering broker's footprint, not the cell's.
        head[2] = "this broker's bytes " .. human_bytes(listing.cellBytes)
            .. (frame.system and (" of " .. human_bytes(
                    frame.system.cellMaxBytes)) or "")
    end
    head[#head + 1] = "surface " .. surface(frame)
    local policy = frame.system and frame.system.policy
    if policy then
        head[#head + 1] = format("policy %s v%s", policy.name,
                                 tostring(policy.version))
    end
    local lines = { broker(frame), concat(head, "  ") }
    local t = frame.counters
    if t then
        local function count(field)
            local n = format("%s %d", field, t[field])
            local p = previous and previous.counters
            if p and frame.at > previous.at then
                n = n .. format(" (%.1f/s)", math.max(0, t[field] - p[field])
                                / (frame.at - previous.at))
            end
            return n
        end
        local line = format("tenant %s  %s  %s  parked %d", frame.tenant,
                            count("pushed"), count("delivered"), t.parked)
        local l = frame.limits
        if l then
            line = line .. (l.rate > 0 and format("  rate %d/s burst %d",
                                                  l.rate, l.burst)
                            or "  rate unlimited")
        end
        lines[#lines + 1] = line
    end
    lines[#lines + 1] = ""
    if listing then
        for _, l in ipairs(table_lines(listing)) do lines[#lines + 1] = l end
        if not frame.listing then
            lines[#lines + 1] = format("(as of %s: the listing is refused "
                                       .. "while the surface is paused)",
                                       clock(shown.at))
        end
    else
        lines[#lines + 1] = "(no listing: while the surface is paused "
                            .. "every ephemeral route refuses, this one too)"
    end
    return lines
end

local function snapshot(c, tenant)
    local frame = { tenant = tenant, at = socket.gettime() }
    frame.listing, frame.err = c:queues()
    -- Paused, the family's listing refuses; the operator's does not. Nor
    -- does it refuse an admin whose own tenant has no grant (an admin
    -- token under tenancy headers and QUEEN_EPHEMERAL_REQUIRE_GRANT): the
    -- grant gates the family, not the operator's view.
    local code = frame.err and frame.err.code
    if code == "ephemeral_disabled" then
        frame.listing = c:system_queues(tenant)
    elseif code == "feature_gated" then
        local listing = c:system_queues(tenant)
        if listing then frame.listing, frame.err = listing, nil end
    end
    if frame.listing then frame.listing.at = frame.at end
    frame.system = c:system()
    frame.cell, frame.url = c:cell(), c.url
    local m = tenant and c:metering("tenant=" .. tenant)
    -- A tenant the broker has not seen yet has no counters.
    frame.counters = m and (m.tenants[1] or { pushed = 0, delivered = 0,
                                              parked = 0 })
    frame.limits = m and m.limits
    return frame
end

-- Draws one frame; returns the exit status and the listing to keep.
local function status_frame(c, out, tenant, shown, previous)
    local frame = snapshot(c, tenant)
    local paused = frame.err and frame.err.code == "ephemeral_disabled"
    if not frame.listing and not paused then
        return failure("status", c, frame.err), shown, frame
    end
    out:write(concat(_M.render(frame, shown, previous), "\n"), "\n")
    return 0, frame.listing or shown, frame
end

-- isatty and poll for --watch; declared here, the plain state the CLI runs
-- in has no broker FFI (a pcall: a second require must not fail).
pcall(ffi.cdef, [[
int isatty(int fd);
struct ephd_cli_pollfd { int fd; short events; short revents; };
int poll(struct ephd_cli_pollfd *fds, unsigned long nfds, int timeout);
]])

-- Waits up to seconds; returns false as soon as stdout's reader is gone
-- (a pipe's closed read end polls as POLLERR, whatever events asked), so
-- `ephd status --watch | head` ends when head does, not a frame later.
local function stdout_open_after(seconds)
    local p = ffi.new("struct ephd_cli_pollfd", { fd = 1, events = 0 })
    local deadline = socket.gettime() + seconds
    repeat
        local left = deadline - socket.gettime()
        local n = ffi.C.poll(p, 1, math.max(0, floor(left * 1000 + 0.5)))
        if n > 0 then return false end
    until socket.gettime() >= deadline
    return true
end

-- --watch: draw's frame on stdout (out) every interval seconds, after the
-- time and the broker, until interrupted or until stdout is closed (exit
-- 0: the reader had what it wanted). A terminal redraws in place (home
-- and clear); a pipe or a file gets the frames one after another, with no
-- escape codes. luasocket ignores SIGPIPE, so a write to a closed pipe
-- fails rather than kills, and the failure is the end.
local function watch(out, c, interval, draw)
    local clear = ffi.C.isatty(1) == 1
    local first = true
    while true do
        out:write(clear and "\27[H\27[2J" or (first and "" or "\n"),
                  os.date("%H:%M:%S"), "  ", c.url, "\n")
        first = false
        draw()
        if not out:flush() or not stdout_open_after(interval) then
            return 0
        end
    end
end

-- The arguments of a command that draws its frame once, or with --watch
-- every --interval seconds (interval by default), its words starting at
-- args[first]: the options, the connection and the interval; or nil and
-- the exit status after saying what is wrong (or the help).
local function watch_args(args, first, command, topic, interval, out)
    local opts, rest = parse(args, first, with_connection({
        ["--interval"] = "value", ["--watch"] = "flag",
    }))
    if not opts then
        io.stderr:write("ephd ", command, ": ", rest, "\n")
        return nil, usage(topic)
    end
    if opts.help then return nil, usage(topic, out) end
    if #rest > 0 then return nil, usage(topic) end
    interval = tonumber(opts.interval or interval)
    if not interval or interval <= 0 then return nil, usage(topic) end
    local c = connect(command, opts)
    if not c then return nil, 2 end
    return opts, c, interval
end

function _M.status(args, out)
    local opts, c, interval = watch_args(args, 2, "status", "status", 1, out)
    if not opts then return c end
    local tenant = opts.tenant or (not opts.token and DEFAULT_TENANT) or nil
    if not opts.watch then return (status_frame(c, out, tenant)) end
    local shown, previous
    return watch(out, c, interval, function()
        local _, kept, frame = status_frame(c, out, tenant, shown, previous)
        shown, previous = kept, frame
    end)
end

-- ephd push / pop / ack ----------------------------------------------------

-- The contract's most items in one push or ack.
local MAX_ITEMS = 10000

-- Strict JSON, as the broker takes it: no NaN, Infinity or hex numbers.
local json = cjson.new()
json.decode_invalid_numbers(false)

-- The options, the queue and the other arguments; or nil and the exit
-- status after saying what is wrong (or the help).
local function verb_args(command, args, spec, out)
    local opts, rest = parse(args, 2, with_connection(spec))
    if not opts then
        io.stderr:write("ephd ", command, ": ", rest, "\n")
        return nil, usage(command)
    end
    if opts.help then return nil, usage(command, out) end
    local queue = table.remove(rest, 1)
    if not queue then return nil, usage(command) end
    return opts, queue, rest
end

-- Sends items in requests of at most MAX_ITEMS: the list given, else
-- stdin's lines made items by each_line, so input of any length goes
-- through without being held whole.
local function in_requests(items, send, each_line)
    if #items > 0 then
        for first = 1, #items, MAX_ITEMS do
            local last = math.min(#items, first + MAX_ITEMS - 1)
            local ok, err = send({ unpack(items, first, last) })
            if not ok then return nil, err end
        end
        return true
    end
    local chunk = {}
    for line in io.stdin:lines() do
        chunk[#chunk + 1] = each_line(line)
        if #chunk == MAX_ITEMS then
            local ok, err = send(chunk)
            if not ok then return nil, err end
            chunk = {}
        end
    end
    if #chunk > 0 then return send(chunk) end
    return true
end

function _M.push(args, out)
    local opts, queue, messages = verb_args("push", args, {
        ["--partition"] = "value", ["--string"] = "flag", ["--json"] = "flag",
    }, out)
    if not opts then return queue end
    local c = connect("push", opts)
    if not c then return 2 end
    local function payload(text)
        if not opts.string and json.decode(text) ~= nil then
            return client.raw(text)
        end
        return text
    end
    for i, m in ipairs(messages) do messages[i] = payload(m) end
    local pushed = 0
    local ok, err = in_requests(messages, function(list)
        local n, e = c:push(queue, list, { partition = opts.partition })
        if not n then return nil, e end
        pushed = pushed + n
        return true
    end, payload)
    if not ok then
        if pushed > 0 then
            io.stderr:write("ephd push: ", pushed, " pushed before\n")
        end
        return failure("push", c, err)
    end
    out:write(opts.json and format('{"pushed":%d}', pushed)
              or ("pushed " .. pushed), "\n")
    return 0
end

local function positive_integer(v)
    local n = tonumber(v)
    return n and n >= 1 and n == floor(n) and n or nil
end

function _M.pop(args, out)
    local opts, queue, rest = verb_args("pop", args, {
        ["--group"] = "value", ["--partition"] = "value",
        ["--batch"] = "value", ["--wait"] = "seconds?",
        ["--commit-on-delivery"] = "flag", ["--ack"] = "flag",
        ["--json"] = "flag",
    }, out)
    if not opts then return queue end
    if #rest > 0 then return usage("pop") end
    local batch = opts.batch and positive_integer(opts.batch)
    local wait = opts.wait and opts.wait ~= true and tonumber(opts.wait)
    if (opts.batch and not batch)
            or (opts.wait and opts.wait ~= true
                and not (wait and wait > 0 and wait <= 300)) then
        io.stderr:write("ephd pop: --batch is a whole number from 1, "
                        .. "--wait seconds up to 300\n")
        return usage("pop")
    end
    local c = connect("pop", opts)
    if not c then return 2 end
    local msgs, err = c:pop(queue, {
        group = opts.group, partition = opts.partition, batch = batch,
        wait = opts.wait ~= nil, timeout = wait and floor(wait * 1000 + 0.5),
        commitOnDelivery = opts.commit_on_delivery or opts.ack, raw = true,
    })
    if not msgs then return failure("pop", c, err) end
    if opts.json then
        local items = {}
        for i, m in ipairs(msgs) do
            items[i] = format('{"id":%s,"partition":%s,"attempts":%d,'
                              .. '"payload":%s}', cjson.encode(m.id),
                              cjson.encode(m.partition), m.attempts,
                              m.payload)
        end
        out:write('{"queue":', cjson.encode(queue), ',"messages":[',
                  concat(items, ","), "]}\n")
        return 0
    end
    for _, m in ipairs(msgs) do
        out:write(m.id, "\t", m.partition, "\t", m.attempts, "\t", m.payload,
                  "\n")
    end
    if #msgs == 0 then io.stderr:write("(no messages)\n") end
    return 0
end

local STATUSES = { completed = true, failed = true, retry = true }

function _M.ack(args, out)
    local opts, queue, ids = verb_args("ack", args, {
        ["--group"] = "value", ["--status"] = "value", ["--json"] = "flag",
    }, out)
    if not opts then return queue end
    if opts.status and not STATUSES[opts.status] then
        io.stderr:write("ephd ack: --status is completed, failed or retry\n")
        return usage("ack")
    end
    local c = connect("ack", opts)
    if not c then return 2 end
    local results = {}
    local ok, err = in_requests(ids, function(list)
        if opts.status then
            for i, id in ipairs(list) do
                list[i] = { id = id, status = opts.status }
            end
        end
        local r, e = c:ack(queue, list, { group = opts.group })
        if not r then return nil, e end
        for _, x in ipairs(r) do results[#results + 1] = x end
        return true
    end, function(line) return (line:match("^[^\t]*")) end)
    if not ok then return failure("ack", c, err) end
    if opts.json then
        local items = {}
        for i, r in ipairs(results) do
            items[i] = format('{"id":%s,"outcome":%s}', cjson.encode(r.id),
                              cjson.encode(r.outcome))
        end
        out:write('{"results":[', concat(items, ","), "]}\n")
        return 0
    end
    for _, r in ipairs(results) do
        out:write(r.id, "\t", r.outcome, "\n")
    end
    return 0
end

-- ephd grant ---------------------------------------------------------------

local function limit_cell(v)
    return v and tostring(v) or "default"
end

local GRANT_COLUMNS = { "TENANT", "ENABLED", "MAX BYTES", "MAX QUEUES",
                        "RATE/S" }

local function grant_list(c, opts, out)
    local r, err = c:grants()
    if not r then return failure("grant", c, err) end
    if opts.json then
        local items = {}
        for i, g in ipairs(r.grants) do items[i] = cjson.encode(g) end
        out:write(format('{"grants":[%s],"count":%d,"requireGrant":%s}\n',
                         concat(items, ","), r.count,
                         tostring(r.requireGrant)))
        return 0
    end
    local rows = { GRANT_COLUMNS }
    for _, g in ipairs(r.grants) do
        rows[#rows + 1] = { g.tenant, g.enabled and "yes" or "no",
                            limit_cell(g.maxBytes), limit_cell(g.maxQueues),
                            limit_cell(g.maxMsgsPerSec) }
    end
    write_columns(out, rows)
    if #r.grants == 0 then out:write("(no grants)\n") end
    out:write(format("%d grant%s; a tenant without one is %s\n", r.count,
                     r.count == 1 and "" or "s",
                     r.requireGrant and "refused (feature_gated)"
                     or "served with the defaults"))
    return 0
end

local function grant_set(c, opts, tenant, out)
    local grant = { tenant = tenant, enabled = not opts.disabled }
    for option, field in pairs({ max_bytes = "maxBytes",
                                 max_queues = "maxQueues",
                                 rate = "maxMsgsPerSec" }) do
        if opts[option] then
            local n = tonumber(opts[option])
            if not n or n < 0 or n ~= floor(n) then
                io.stderr:write("ephd grant: --", (option:gsub("_", "-")),
                                " is a whole number from 0\n")
                return usage("grant")
            end
            grant[field] = n
        end
    end
    local g, err = c:grant_set(grant)
    if not g then return failure("grant", c, err) end
    if opts.json then
        out:write(cjson.encode(g), "\n")
        return 0
    end
    out:write(format("granted %s: %s, max bytes %s, max queues %s, "
                     .. "rate %s/s\n", g.tenant,
                     g.enabled and "enabled" or "DISABLED",
                     limit_cell(g.maxBytes), limit_cell(g.maxQueues),
                     limit_cell(g.maxMsgsPerSec)))
    return 0
end

function _M.grant(args, out)
    local action = args[2]
    local opts, rest = parse(args, 3, with_connection({
        ["--disabled"] = "flag", ["--max-bytes"] = "value",
        ["--max-queues"] = "value", ["--rate"] = "value", ["--json"] = "flag",
    }))
    if not opts then
        io.stderr:write("ephd grant: ", rest, "\n")
        return usage("grant")
    end
    if opts.help or action == "--help" or action == "-h" then
        return usage("grant", out)
    end
    local arity = { list = 0, set = 1, rm = 1 }
    if arity[action] ~= #rest then return usage("grant") end
    local c = connect("grant", opts)
    if not c then return 2 end
    if action == "list" then return grant_list(c, opts, out) end
    if action == "set" then return grant_set(c, opts, rest[1], out) end
    local deleted, err = c:grant_delete(rest[1])
    if deleted == nil then return failure("grant", c, err) end
    out:write(deleted and "removed " or "no grant for ", rest[1], "\n")
    return 0
end

-- ephd policy test --------------------------------------------------------

local function shell_quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

function _M.policy_test(args, out, lua_path)
    if args[3] == "--help" or args[3] == "-h" then
        return usage("policy_test", out)
    end
    local dir = args[3]
    if not dir then return usage("policy_test") end
    local extra = {}
    for i = 4, #args do extra[#extra + 1] = shell_quote(args[i]) end
    -- The policy's own directory first: its specs require its modules.
    local path = dir .. "/?.lua;" .. dir .. "/?/init.lua;" .. lua_path
    local cmd = format("EPHD_POLICY_DIR=%s LUA_PATH=%s busted --lua=luajit "
                       .. "--pattern=_spec %s %s", shell_quote(dir),
                       shell_quote(path .. ";;"), concat(extra, " "),
                       shell_quote(dir))
    local ok, how, code = os.execute(cmd)
    -- LuaJIT's os.execute answers like 5.2's when built with 5.2 compat,
    -- like 5.1's (the raw status) otherwise.
    if type(ok) == "number" then return ok == 0 and 0 or 1 end
    if how == "exit" then return code end
    return 1
end

-- ephd policy replay ------------------------------------------------------

local function read_grants(path)
    local f, err = io.open(path, "rb")
    if not f then return nil, err end
    local text = f:read("*a")
    f:close()
    local doc = cjson.decode(text)
    if type(doc) ~= "table" or type(doc.grants) ~= "table" then
        return nil, path .. " is not `ephd grant list --json`'s answer"
    end
    local rows = {}
    for _, g in ipairs(doc.grants) do
        local function column(v) return v ~= cjson.null and v or nil end
        if type(g) == "table" and type(g.tenant) == "string" then
            rows[g.tenant:lower()] = require("ephd.contract").grant(
                g.enabled ~= false, column(g.maxBytes), column(g.maxQueues),
                column(g.maxMsgsPerSec))
        end
    end
    local require_grant = doc.requireGrant
    if type(require_grant) ~= "boolean" then require_grant = nil end
    return rows, require_grant
end

function _M.policy_replay(args, out)
    local opts, rest = parse(args, 3, {
        ["--policy"] = "value", ["--log"] = "value", ["--grants"] = "value",
        ["--first"] = "value", ["--top"] = "value",
    })
    if not opts then
        io.stderr:write("ephd policy replay: ", rest, "\n")
        return usage("policy_replay")
    end
    if opts.help then return usage("policy_replay", out) end
    local first, top = positive_integer(opts.first or "20"),
                       positive_integer(opts.top or "10")
    if #rest > 0 or not opts.policy or not opts.log or not first or not top then
        return usage("policy_replay")
    end
    local testing = require("ephd.testing")
    local policy = require("ephd.policy")
    local replay = require("ephd.replay")
    local grants, require_grant = {}, nil
    if opts.grants then
        grants, require_grant = read_grants(opts.grants)
        if not grants then
            io.stderr:write("ephd policy replay: ", require_grant, "\n")
            return 2
        end
    end
    local log, err = io.open(opts.log, "rb")
    if not log then
        io.stderr:write("ephd policy replay: ", err, "\n")
        return 2
    end
    -- Loaded as the broker loads one: the same sandbox over the default
    -- policy; its ephd.now() is the replayed request's time.
    local r
    local default_dir = testing.default_dir()
    local p, why = policy.load(opts.policy, testing.read(opts.policy),
                               default_dir, testing.read(default_dir), {
        now = function() return r and r:now() or 0 end,
        counters = function() return nil end,
    })
    if not p then
        log:close()
        io.stderr:write("ephd policy replay: ", opts.policy, ": ",
                        tostring(why), "\n")
        return 1
    end
    r = replay.new(p, { grants = grants, require_grant = require_grant,
                        first = first })
    local n, failed = 0, nil
    while true do
        -- A read that fails (a directory, an I/O error) is a log that
        -- cannot be read, named as one, not a Lua error.
        local text, rerr = log:read("*l")
        if not text then
            if not rerr then break end
            log:close()
            io.stderr:write("ephd policy replay: ", opts.log, ": ", rerr,
                            "\n")
            return 2
        end
        n = n + 1
        local ok, e = pcall(r.line, r, text)
        if not ok then
            local hook, message = require("ephd.verdict").failure(e)
            failed = format("%s's %s hook failed at line %d of %s: %s; "
                            .. "replayed up to there", p.name,
                            hook or "?", n, opts.log, message)
            break
        end
    end
    log:close()
    r:report(out, format("ephd policy replay: %s (%s v%s) against %s",
                         opts.policy, p.name, tostring(p.version),
                         opts.log), top)
    if failed then
        io.stderr:write("ephd policy replay: ", failed, "\n")
        return 1
    end
    return 0
end

-- ephd policy shadow ------------------------------------------------------

local function since(ms)
    return os.date("%Y-%m-%d %H:%M:%S", floor(ms / 1000))
end

-- The shadow's report (GET /api/v1/system/policy/shadow) as lines.
function _M.render_shadow(s, out)
    if not s then
        out:write("no shadow policy is loaded\n")
        return
    end
    out:write(format("shadow %s v%s from %s, since %s, judging %s: %s\n",
                     s.name, tostring(s.version), s.dir, since(s.since),
                     s.routes == "all" and "every route"
                     or "the family's routes",
                     s.state == "running" and "running" or "DISABLED"))
    if s.disabled then
        out:write(format("disabled at %s: its %s hook failed: %s\n",
                         since(s.disabled.at), s.disabled.hook,
                         s.disabled.error))
    end
    out:write(format("%d request%s judged, %d disagreement%s\n\n",
                     s.decisions, s.decisions == 1 and "" or "s",
                     s.disagreements, s.disagreements == 1 and "" or "s"))
    local rows = { { "LIVE", "", "SHADOW", "REQUESTS" } }
    for _, p in ipairs(s.pairs) do
        rows[#rows + 1] = { p.live, p.live == p.shadow and "==" or "->",
                            p.shadow, tostring(p.count) }
    end
    if #s.pairs == 0 then rows[#rows + 1] = { "(no requests yet)" } end
    write_columns(out, rows)
    if #s.tenants > 0 then
        out:write("\n")
        rows = { { "TENANT", "DISAGREEMENTS" } }
        for _, t in ipairs(s.tenants) do
            rows[#rows + 1] = { t.tenant, tostring(t.disagreements) }
        end
        write_columns(out, rows)
    end
    if #s.samples > 0 then
        out:write("\nlast disagreements, newest first:\n")
        rows = { { "TIME", "ROUTE", "TENANT", "LIVE", "SHADOW", "RUNG" } }
        for _, x in ipairs(s.samples) do
            rows[#rows + 1] = { clock(x.at / 1000), x.route, x.tenant or "-",
                                x.live, x.shadow, x.rung }
        end
        write_columns(out, rows)
    end
end

local function shadow_frame(c, out)
    local r, err = c:request("GET", "/api/v1/system/policy/shadow")
    if not r then return failure("policy shadow", c, err) end
    _M.render_shadow(r.shadow, out)
    return 0
end

function _M.policy_shadow(args, out)
    local opts, c, interval = watch_args(args, 3, "policy shadow",
                                         "policy_shadow", 2, out)
    if not opts then return c end
    if not opts.watch then return shadow_frame(c, out) end
    return watch(out, c, interval, function() shadow_frame(c, out) end)
end

local COMMANDS = { status = _M.status, push = _M.push, pop = _M.pop,
                   ack = _M.ack, grant = _M.grant }

-- Returns the process's exit status.
function _M.main(args, lua_path)
    local out = io.stdout
    local command = COMMANDS[args[1]]
    if command then return command(args, out) end
    if args[1] == "policy" and args[2] == "test" then
        return _M.policy_test(args, out, lua_path)
    end
    if args[1] == "policy" and args[2] == "replay" then
        return _M.policy_replay(args, out)
    end
    if args[1] == "policy" and args[2] == "shadow" then
        return _M.policy_shadow(args, out)
    end
    io.stderr:write("ephd: unknown command ", tostring(args[1]),
                    " (status, push, pop, ack, grant, policy check, "
                    .. "policy test, policy shadow, policy replay; "
                    .. "see ephd --help)\n")
    return 2
end

return _M
