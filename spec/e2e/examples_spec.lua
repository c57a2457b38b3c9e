-- Every example of examples/ runs against a real broker (with the private
-- PostgreSQL, for the one that declares a queue) and says what it showed.
local daemon = require("e2e.daemon")
local helper = require("helper")

-- url: the broker's, or an EPHD_TEST_PORTS range for one of its own.
local function run(name, url)
    local env = url:find("^http") and ("EPHD_URL=" .. url)
                or ("EPHD_URL= EPHD_TEST_PORTS=" .. url)
    local p = io.popen(("cd %s && %s examples/run %s 2>&1; "
                        .. "echo \"exit=$?\""):format(helper.root, env, name))
    local out = p:read("*a")
    p:close()
    local body, code = out:match("^(.*)exit=(%d+)%s*$")
    return body, tonumber(code)
end

describe("examples", function()
    local d, url
    lazy_setup(function()
        d = daemon.start({ db = true })
        url = "http://127.0.0.1:" .. d.port
    end)
    lazy_teardown(function()
        d:stop()
        daemon.forget_declarations()
    end)

    it("request-reply: every reply reaches its own inbox", function()
        local out, code = run("request-reply", url)
        assert.equals(0, code, out)
        assert.matches("20 round trips, each reply in its own inbox", out)
    end)

    it("presence: every subscriber's group sees every event", function()
        local out, code = run("presence", url)
        assert.equals(0, code, out)
        for _, who in ipairs({ "alice", "bob", "carol" }) do
            assert.matches(who .. "%-ui saw all 5 events in order", out)
        end
    end)

    it("starts a broker of its own within EPHD_TEST_PORTS", function()
        local port = daemon.free_port()
        local out, code = run("presence", port .. "-" .. port)
        assert.equals(0, code, out)
        local f = assert(io.open(helper.build .. "/example-presence.log"))
        local log = f:read("*a")
        f:close()
        assert.truthy(log:find("event=listening addr=127.0.0.1:" .. port
                               .. " ", 1, true), log)
    end)

    it("progress: dropOldest keeps the latest, ttl expires the rest",
       function()
        local out, code = run("progress", url)
        assert.equals(0, code, out)
        assert.matches("sees 80, 85, 90, 95, 100", out)
        assert.matches("1 expired by ttl", out)
    end)
end)
