-- The manual's commands stay true: every fenced `sh` block of README.md,
-- docs/*.md and the examples' READMEs runs, in order, against a broker of
-- its own (with the private PostgreSQL, emptied of earlier files'
-- declarations as a fresh clone's is), with localhost:6632 pointing at it,
-- HOME in a scratch directory and build/ at this build. The `text` block
-- right after one lists lines its output must contain (spaces collapsed);
-- in a file marked `<!-- docs_spec: exact -->` (the quickstart) it is the
-- whole output, as a terminal shows it (tabs expanded, no CR).
-- What differs from one reader to the next is matched by pattern: the
-- broker's epoch is written 9f3a1c42 in ids (and is the broker's real one
-- in the commands run, as the reader pastes their own id), and
-- timestamps, clock times, durations and the home directory (`~`) are
-- whatever they are.
-- A `sh norun` block starts a server or runs for minutes; each of its
-- commands must be one CI runs itself (NORUN below), and a
-- `<!-- docs_spec: restart ARGS -->` before one restarts the broker with
-- ARGS (NAME=value words as its environment), as the reader would.
local daemon = require("e2e.daemon")
local helper = require("helper")

-- Commands shown but run elsewhere, and where.
local NORUN = {
    ["scripts/run"] = "the README's first command; .ci/run runs the suite "
                      .. "that starts the same binary",
    ["scripts/test"] = ".ci/run",
    ["EPHD_BUILD_DIR=build-asan scripts/test"] = ".ci/run",
    ["bench/run"] = ".ci/run (--quick)",
    ["bench/soak"] = ".ci/run (60 s)",
    ["bench/chaos"] = "by hand until issue 22's fixes land; then .ci/run "
                      .. "(--short)",
    ["bench/wrk-push"] = "by hand: wrk is not a dependency of the suite",
    ["luajit bench/hostile.lua"] = "by hand, against two builds: the "
        .. "figures only; backpressure_spec and footprint_spec assert the "
        .. "bounds",
    ["fuzz/run"] = ".ci/run (30 s per target)",
    ["bash .ci/run"] = "CI itself",
}

local function read(path)
    local f = assert(io.open(path))
    local text = f:read("*a")
    f:close()
    return text
end

-- The blocks of a Markdown file: {kind = "sh"|"norun"|"text", body,
-- restart = args}.
local function blocks(text)
    local out, pending_restart = {}, nil
    local pos = 1
    while true do
        local s, e, info = text:find("\n```([%w ]*)\n", pos)
        if not s then break end
        local close_s, close_e = text:find("\n```\n", e, true)
        if not close_s then close_s, close_e = text:find("\n```$", e) end
        local body = text:sub(e + 1, close_s - 1)
        local between = text:sub(pos, s)
        local restart = between:match("<!%-%- docs_spec: restart (.-) %-%->")
        if restart then pending_restart = restart end
        if info == "sh" then
            out[#out + 1] = { kind = "sh", body = body }
        elseif info == "sh norun" then
            out[#out + 1] = { kind = "norun", body = body,
                              restart = pending_restart }
            pending_restart = nil
        elseif info == "text" then
            out[#out + 1] = { kind = "text", body = body }
        end
        pos = close_e
    end
    return out
end

local function squeeze(s)
    return (s:gsub("[ \t]+", " "))
end

-- The epoch the manual writes in message ids.
local DOC_EPOCH = "9f3a1c42"

-- Text with what differs between runs in one form, the manual's and the
-- output alike.
local function canonical(text, epoch, home)
    text = text:gsub("\r", "")
    if epoch then
        text = text:gsub("e:" .. epoch .. ":", "e:" .. DOC_EPOCH .. ":")
    end
    if home then
        text = text:gsub(home:gsub("%p", "%%%0"), "~")
    end
    return (text
        :gsub("%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d+Z", "<timestamp>")
        :gsub("%d%d:%d%d:%d%d", "<time>")
        :gsub("%d+%.%d+ seconds", "<n> seconds")
        -- `ephd status`'s first line: a member id, an address, an epoch.
        :gsub("broker %x+ at http://%S+ epoch %x+",
              "broker <id> at <address> epoch <epoch>"))
end

-- As a terminal shows it: tabs to the next multiple of 8 columns.
local function expand(text)
    return (text:gsub("[^\n]*", function(line)
        local out, col = {}, 0
        for piece, tab in line:gmatch("([^\t]*)(\t?)") do
            out[#out + 1] = piece
            col = col + #piece
            if tab ~= "" then
                local n = 8 - col % 8
                out[#out + 1] = (" "):rep(n)
                col = col + n
            end
        end
        return table.concat(out)
    end))
end

-- The broker's epoch, from its listening line.
local function epoch_of(d)
    -- Its own line: a cell's lines before it name other members' epochs.
    return d:await_log(" event=listening ", 5)
        :match(" event=listening [^\n]* epoch=(%x+)")
end

local FILES = {}
for name in io.popen("cd " .. helper.root .. " && ls README.md docs/*.md "
                     .. "examples/README.md examples/*/README.md"):lines() do
    FILES[#FILES + 1] = name
end

describe("the manual's commands", function()
    local home
    lazy_setup(function()
        home = os.tmpname()
        os.remove(home)
        assert(os.execute("mkdir -p " .. home))
    end)
    lazy_teardown(function()
        os.execute("rm -rf " .. home)
        daemon.forget_declarations()
    end)

    -- again: a second run of the same file as a reader re-runs it, with
    -- what the first left in PostgreSQL (grants, declarations) and in HOME.
    local function runs(file, list, exact, again)
        return function()
            if not again then
                daemon.forget_declarations()
                daemon.sql("TRUNCATE queen.ephemeral_quota")
            end
            local d = daemon.start({ db = true })
            local epoch = epoch_of(d)
            -- Whichever broker is current when the spec ends or fails.
            finally(function() d:stop() end)
            local function run(body)
                local script = body
                    :gsub("localhost:6632", "localhost:" .. d.port)
                    :gsub("127%.0%.0%.1:6632", "127.0.0.1:" .. d.port)
                    :gsub("build/ephd", helper.build .. "/ephd")
                    :gsub("e:" .. DOC_EPOCH .. ":", "e:" .. epoch .. ":")
                local path = os.tmpname()
                local f = assert(io.open(path, "w"))
                f:write("set -e\n", script, "\n")
                f:close()
                local p = io.popen(("cd %s && HOME=%s EPHD_URL=%s "
                    .. "bash %s 2>&1; echo \"exit=$?\"")
                    :format(helper.root, home,
                            "http://127.0.0.1:" .. d.port, path))
                local out = p:read("*a")
                p:close()
                os.remove(path)
                local text, code = out:match("^(.*)exit=(%d+)%s*$")
                return text, tonumber(code)
            end
            local last
            for _, b in ipairs(list) do
                if b.kind == "sh" then
                    local out, code = run(b.body)
                    assert.equals(0, code, file .. ":\n" .. b.body
                                  .. "\n--- printed:\n" .. out)
                    last = { body = b.body, out = out }
                elseif b.kind == "text" and last then
                    local out = canonical(last.out, epoch, home)
                    local shown = canonical(b.body)
                    if exact then
                        assert.equals(shown, expand(out):gsub("\n$", ""),
                                      file .. ": the output of\n"
                                      .. last.body)
                    end
                    for line in shown:gmatch("[^\n]+") do
                        assert.is_truthy(
                            squeeze(out):find(squeeze(line), 1, true),
                            file .. ": expected \"" .. line .. "\" from\n"
                            .. last.body .. "\n--- printed:\n" .. out)
                    end
                    last = nil
                elseif b.kind == "norun" then
                    for line in b.body:gmatch("[^\n]+") do
                        -- The environment a command is run with is
                        -- not the command.
                        local cmd = line:gsub("%s+#.*$", "")
                            :gsub("^[%u_][%w_]*=%S*%s+", "")
                        local known = false
                        for prefix in pairs(NORUN) do
                            if cmd:sub(1, #prefix) == prefix then
                                known = true
                            end
                        end
                        assert.is_true(known, file .. ": \"" .. cmd
                            .. "\" is shown but nothing runs it")
                    end
                    if b.restart then
                        d:stop()
                        local args, env = {}, {}
                        for a in b.restart:gsub("~", home):gmatch("%S+") do
                            local k, v = a:match("^([%u_][%w_]*)=(.*)$")
                            if k then
                                env[k] = v
                            else
                                args[#args + 1] = a
                            end
                        end
                        d = daemon.start({ db = true, args = args,
                                           env = env })
                        epoch = epoch_of(d)
                    end
                    last = nil
                end
            end
            d:stop()
        end
    end

    for _, file in ipairs(FILES) do
        local text = read(helper.root .. "/" .. file)
        local list = blocks(text)
        local exact = text:find("<!-- docs_spec: exact -->", 1, true)
        if #list > 0 then
            it(file, runs(file, list, exact))
            -- The quickstart is followed step by step, and so re-run as
            -- written: every step must be one that can be taken twice.
            if exact then
                it(file .. ", run a second time", runs(file, list, exact,
                                                       true))
            end
        end
    end
end)
