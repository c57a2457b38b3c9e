-- The commands of `ephd` that are not the broker: `ephd status` (the
-- tenant's queues as a table, once or like top) and `ephd policy test`
-- (a policy directory's busted specs with ephd.testing on the path).
-- `ephd policy check` stays in C: it loads policy code the way the broker
-- does, in the broker's sandbox.
local client = require("ephd.client")

local concat, format, rep = table.concat, string.format, string.rep

local _M = {}

local USAGE = {
    status = [[
usage: ephd status [--url URL] [--tenant UUID] [--token TOKEN]
                   [--watch] [--interval SECONDS]

Prints every queue of the tenant (GET /api/v1/ephemeral/queues) as a
table: tier, depth, bytes, partitions, groups and drops by cause, with the
cell's bytes and the kill switch. --watch redraws it every --interval
seconds (1 by default) until interrupted. URL defaults to $EPHD_URL, then
http://127.0.0.1:6632.
]],
    policy_test = [[
usage: ephd policy test DIR [BUSTED ARGS...]

Runs the busted specs under DIR (files ending in _spec.lua) with LuaJIT,
with ephd.testing and the broker's modules on the Lua path and
EPHD_POLICY_DIR set to DIR, so a spec loads the policy with
require("ephd.testing").load() and drives its hooks without a broker.
Exits with busted's status.
]],
}

local function usage(which, out)
    (out or io.stderr):write(USAGE[which])
    return out and 0 or 2
end

-- Options -----------------------------------------------------------------

local function parse(args, first, known, flags)
    local opts, rest = {}, {}
    local i = first
    while i <= #args do
        local a = args[i]
        if a == "--help" or a == "-h" then
            opts.help = true
        elseif flags[a] then
            opts[flags[a]] = true
        elseif known[a] then
            if args[i + 1] == nil then return nil, a .. " needs a value" end
            opts[known[a]] = args[i + 1]
            i = i + 1
        elseif a:sub(1, 2) == "--" then
            return nil, "unknown option " .. a
        else
            rest[#rest + 1] = a
        end
        i = i + 1
    end
    return opts, rest
end

-- ephd status -------------------------------------------------------------

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
                  "DROPS b/t/r" }

-- The table as lines, widest cell per column, numbers right-aligned.
function _M.render(listing, switch)
    local rows = {}
    for _, q in ipairs(listing.queues) do
        local d = q.drops
        rows[#rows + 1] = {
            q.queue, q.tier, tostring(q.depth), human_bytes(q.bytes),
            tostring(q.partitions), tostring(q.groups),
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
    local state = "unknown (needs admin)"
    if switch then
        state = switch.enabled and "enabled" or
            ("PAUSED" .. (switch.reason and (": " .. switch.reason) or ""))
    end
    local lines = {
        format("%d queue%s  cell %s  surface %s", listing.count,
               listing.count == 1 and "" or "s",
               human_bytes(listing.cellBytes), state),
        "",
        line(COLUMNS),
    }
    for _, r in ipairs(rows) do lines[#lines + 1] = line(r) end
    if #rows == 0 then lines[#lines + 1] = "(no queues)" end
    return lines
end

local function status_once(c, out)
    local listing, err = c:queues()
    if not listing then
        io.stderr:write("ephd status: ", tostring(err), "\n")
        return 1
    end
    local switch = c:system()
    out:write(concat(_M.render(listing, switch), "\n"), "\n")
    return 0
end

function _M.status(args, out)
    local opts, rest = parse(args, 2, {
        ["--url"] = "url", ["--tenant"] = "tenant", ["--token"] = "token",
        ["--interval"] = "interval",
    }, { ["--watch"] = "watch" })
    if not opts then
        io.stderr:write("ephd status: ", rest, "\n")
        return usage("status")
    end
    if opts.help then return usage("status", out) end
    if #rest > 0 then return usage("status") end
    local interval = tonumber(opts.interval or 1)
    if not interval or interval <= 0 then return usage("status") end
    local c = client.new({ url = opts.url, tenant = opts.tenant,
                           token = opts.token })
    if not opts.watch then return status_once(c, out) end
    local socket = require("socket")
    while true do
        -- Home and clear, then the frame: a terminal redraws in place.
        out:write("\27[H\27[2J", os.date("%H:%M:%S"), "  ", c.url, "\n")
        status_once(c, out)
        out:flush()
        socket.sleep(interval)
    end
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

-- Returns the process's exit status.
function _M.main(args, lua_path)
    local out = io.stdout
    if args[1] == "status" then return _M.status(args, out) end
    if args[1] == "policy" and args[2] == "test" then
        return _M.policy_test(args, out, lua_path)
    end
    io.stderr:write("ephd: unknown command ", tostring(args[1]), "\n")
    return 2
end

return _M
