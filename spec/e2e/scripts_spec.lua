-- The scripts that start brokers. scripts/run as the README starts it,
-- with its private PostgreSQL in a scratch directory: the broker's pid is
-- known (listening line, pidfile), and signals sent to the script reach
-- the broker, PostgreSQL stopping after it. scripts/free-port, which keeps
-- the suite's brokers within EPHD_TEST_PORTS.
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

    it("refuses a second scripts/run on the same PostgreSQL", function()
        local script, pid = serving("")
        local out, code = helper.run(("cd %s && EPHD_PG_DIR=%s/pg "
            .. "scripts/run --listen 127.0.0.1:%d"):format(helper.root, dir,
                                                          daemon.free_port()))
        assert.equals(1, code, out)
        assert.truthy(out:find("scripts/run: " .. dir .. "/pg is another "
                               .. "scripts/run's PostgreSQL", 1, true), out)
        assert.truthy(out:find("EPHD_PG_DIR=DIR", 1, true), out)
        -- However the directory is spelt: a trailing slash (what a shell's
        -- completion adds), a dot, a symlink. Under `timeout`: a second
        -- broker that started would serve until stopped.
        assert(os.execute("ln -sfn " .. dir .. " " .. dir .. "/link"))
        for _, alias in ipairs({ dir .. "/pg/", dir .. "/./pg",
                                 dir .. "/link/pg" }) do
            out, code = helper.run(("cd %s && EPHD_PG_DIR=%s timeout 20 "
                .. "scripts/run --listen 127.0.0.1:%d"):format(helper.root,
                    alias, daemon.free_port()))
            assert.equals(1, code, alias .. ": " .. out)
            assert.truthy(out:find("is another scripts/run's PostgreSQL", 1,
                                   true), out)
        end
        -- The first one's broker and PostgreSQL were left alone.
        assert.is_true(alive(pid) and pg_running())
        local d = setmetatable({ port = port }, daemon)
        assert.equals(200, d:request("GET", "/health").status)
        os.execute("kill -TERM " .. script)
        local rc, log = finished(script)
        assert.equals(0, rc, log)
        assert.is_false(pg_running())
        -- Once it is gone, the directory is free again.
        script, pid = serving("")
        assert.is_true(alive(pid))
        os.execute("kill -TERM " .. script)
        assert.equals(0, (finished(script)))
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

describe("scripts/free-port", function()
    local function free_port(range)
        local p = io.popen("EPHD_TEST_PORTS='" .. range .. "' "
                           .. helper.root .. "/scripts/free-port 2>&1; "
                           .. "echo \"rc=$?\"")
        local out = p:read("*a")
        p:close()
        return out, tonumber(out:match("rc=(%d+)%s*$"))
    end

    it("gives a free port of EPHD_TEST_PORTS, a range or a base", function()
        local taken = daemon.start()
        finally(function() taken:stop() end)
        local out, rc = free_port(taken.port .. "-" .. taken.port)
        assert.equals(1, rc, out)
        assert.matches("no free port in EPHD_TEST_PORTS", out)
        -- A port the kernel handed out and let go a moment ago is free.
        local free = daemon.free_port()
        out, rc = free_port(free .. "-" .. free)
        assert.equals(0, rc, out)
        assert.equals(free .. "\n", out:match("^%d+\n"))
        out, rc = free_port(tostring(free))
        local got = tonumber(out:match("^(%d+)\n"))
        assert.equals(0, rc, out)
        assert.is_true(got >= free and got <= free + 999)
    end)

    it("refuses what is no range", function()
        for _, bad in ipairs({ "x", "10-5", "1-70000", "20000-" }) do
            local out, rc = free_port(bad)
            assert.equals(2, rc, bad)
            assert.matches("EPHD_TEST_PORTS must be LOW%-HIGH or a base port",
                           out)
        end
    end)
end)
