-- scripts/run as the README starts it, with its private PostgreSQL in a
-- scratch directory: the broker's pid is known (listening line, pidfile),
-- and signals sent to the script reach the broker, PostgreSQL stopping
-- after it.
local daemon = require("e2e.daemon")
local helper = require("helper")

local function read(path)
    local f = io.open(path)
    if not f then return nil end
    local text = f:read("*a")
    f:close()
    return text
end

local function alive(pid)
    local stat = read("/proc/" .. pid .. "/stat")
    return stat ~= nil and not stat:find("^%d+ %b() Z")
end

-- Waits up to `seconds` for fn() to be true; returns its last value.
local function await(fn, seconds)
    local t0 = daemon.now()
    local v = fn()
    while not v and daemon.now() - t0 < seconds do
        daemon.sleep(0.05)
        v = fn()
    end
    return v
end

describe("scripts/run", function()
    local dir, port
    lazy_setup(function()
        dir = os.tmpname()
        os.remove(dir)
        -- World-readable: as root, PostgreSQL runs as postgres.
        assert(os.execute("mkdir -m 755 -p " .. dir))
        port = daemon.free_port()
    end)
    lazy_teardown(function()
        os.execute(helper.root .. "/scripts/pg.sh stop " .. dir
                   .. "/pg >/dev/null 2>&1")
        os.execute("rm -rf " .. dir)
    end)

    -- Starts scripts/run; once the broker listens (or the script is
    -- over), returns the script's pid and the broker's listening line.
    local function start(args)
        for _, f in ipairs({ "rc", "log", "script" }) do
            os.remove(dir .. "/" .. f)
        end
        os.execute(("(cd %s && EPHD_PG_DIR=%s/pg scripts/run --listen "
                    .. "127.0.0.1:%d %s >%s/log 2>&1 & echo $! >%s/script; "
                    .. "wait $!; echo $? >%s/rc) &")
                   :format(helper.root, dir, port, args, dir, dir, dir))
        local line = await(function()
            return (read(dir .. "/log") or ""):match("event=listening [^\n]*")
                   or read(dir .. "/rc")
        end, 60)
        local script = tonumber(read(dir .. "/script"))
        -- Whatever a failing spec leaves running goes with it.
        finally(function() os.execute("kill " .. script .. " 2>/dev/null") end)
        return script, line
    end

    local function serving(args)
        local script, line = start(args)
        local pid = line and tonumber(line:match("listening .* pid=(%d+)"))
        assert.truthy(pid, read(dir .. "/log"))
        return script, pid
    end

    -- Waits for the script to exit; returns its status and the log.
    local function finished(script)
        local rc = await(function()
            return not alive(script) and read(dir .. "/rc")
        end, 10)
        return tonumber(rc), read(dir .. "/log")
    end

    local function pg_running()
        return read(dir .. "/pg/postmaster.pid") ~= nil
    end

    it("names the broker's pid, reloads on HUP and stops on TERM",
       function()
        local script, pid = serving("--pidfile " .. dir .. "/pid")
        assert.is_not.equals(script, pid)
        assert.equals(pid, tonumber(read(dir .. "/pid")))
        assert.matches("/ephd$", (io.popen("readlink /proc/" .. pid
                                           .. "/exe"):read("*l")))
        assert.is_true(pg_running())

        os.execute("kill -HUP " .. script)
        assert.truthy(await(function()
            return read(dir .. "/log"):find("event=policy_reloaded", 1, true)
        end, 5))
        assert.is_true(alive(script) and alive(pid))
        local d = setmetatable({ port = port }, daemon)
        assert.equals(200, d:request("GET", "/health").status)

        os.execute("kill -TERM " .. script)
        local rc, log = finished(script)
        assert.equals(0, rc, log)
        assert.is_false(alive(pid))
        assert.truthy(log:find("event=stopped", 1, true), log)
        assert.is_false(pg_running())
        assert.is_nil(read(dir .. "/pid"))
    end)

    it("stops the private PostgreSQL when the broker is stopped itself",
       function()
        local script, pid = serving("")
        os.execute("kill -TERM " .. pid)
        local rc, log = finished(script)
        assert.equals(0, rc, log)
        assert.is_false(pg_running())
    end)

    it("exits with the broker's status when it cannot start", function()
        local script = start("--listen nowhere")
        local rc, log = finished(script)
        assert.equals(2, rc)
        assert.truthy(log:find("--listen nowhere", 1, true))
        assert.is_false(pg_running())
    end)
end)
