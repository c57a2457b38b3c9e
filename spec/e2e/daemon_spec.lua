-- The daemon as an operator meets it: flags, knobs, help, and stopping.
local daemon = require("e2e.daemon")
local helper = require("helper")


describe("the daemon", function()
    it("prints every flag and knob with its default in --help", function()
        local out, rc = helper.run(helper.build .. "/ephd --help")
        assert.equals(0, rc)
        for _, flag in ipairs({ "--listen", "--policy-dir", "--database-url",
                                "--advertise" }) do
            assert.truthy(out:find(flag, 1, true), flag)
        end
        for _, knob in ipairs({
            "QUEEN_EPHEMERAL_MAX_BYTES%s+268435456",
            "QUEEN_EPHEMERAL_QUEUE_MAX_BYTES%s+16777216",
            "QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH%s+10000",
            "QUEEN_EPHEMERAL_LEASE_S%s+30",
            "QUEEN_EPHEMERAL_RETRY_LIMIT%s+5",
            "QUEEN_EPHEMERAL_POP_TIMEOUT_MS%s+30000",
            "QUEEN_EPHEMERAL_MAX_BODY_BYTES%s+67108864",
            "QUEEN_EPHEMERAL_MEMBER_TTL_MS%s+4000",
            "QUEEN_EPHEMERAL_CELL_TOKEN",
            "QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS%s+5000",
            "QUEEN_EPHEMERAL_RELAY_MAX_CONNS%s+64",
            "QUEEN_EPHEMERAL_RELAY_MAX_PARKED%s+4096",
            "QUEEN_EPHEMERAL_RELAY_MAX_QUEUED%s+1024",
            "QUEEN_EPHEMERAL_RELAY_MAX_IDLE%s+64",
            "QUEEN_EPHEMERAL_RELAY_IDLE_TIMEOUT_MS%s+60000",
            "QUEEN_EPHEMERAL_RELAY_RESOLVE_TTL_MS%s+30000",
            "QUEEN_EPHEMERAL_RELAY_PIPES%s+4",
            "QUEEN_EPHEMERAL_RELAY_TENANT_PARKED%s+1024",
        }) do
            assert.truthy(out:find(knob), knob)
        end
        -- The queue's bounds span its partitions, and each knob is both
        -- the default and the ceiling a configure can put in force.
        assert.matches("QUEEN_EPHEMERAL_QUEUE_MAX_BYTES%s+16777216%s+a queue's "
                       .. "maxBytes over its partitions: default and ceiling", out)
        assert.matches("QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH%s+10000%s+a queue's "
                       .. "maxLength over its partitions: default and ceiling", out)
        -- Relayed pushes and acks go on the pipes, not the short lane
        -- MAX_CONNS bounds: its line must not say they do.
        assert.matches("QUEEN_EPHEMERAL_RELAY_MAX_CONNS%s+64%s+[^\n]*short "
                       .. "lane", out)
        -- Read, if not knobs: the commands' URL and the database's.
        assert.matches("\n  EPHD_URL%s+%(none%)%s+the commands' broker", out)
        assert.matches("\n  DATABASE_URL%s+%(none%)", out)
        -- One column for every default and one for every help text,
        -- however long the name.
        local columns, n = {}, 0
        for line in out:match("environment %(default%):\n(.*)$"):gmatch(
                "[^\n]+") do
            local d, h = line:match("^  %S+%s+()%S+%s+()")
            local at = d .. "," .. h
            if not columns[at] then columns[at], n = true, n + 1 end
        end
        assert.equals(1, n, out)
    end)

    it("stops at boot on a bad flag, naming it", function()
        local out, rc = helper.run(helper.build .. "/ephd --lisen 1.2.3.4:5")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("--lisen", 1, true))
        out, rc = helper.run(helper.build .. "/ephd --listen nowhere")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("--listen", 1, true))
    end)

    it("stops at boot on a knob value it cannot use, naming it", function()
        for _, bad in ipairs({ "abc", "-1", "1.5", "" }) do
            local out, rc = helper.run("QUEEN_EPHEMERAL_LEASE_S='" .. bad .. "' "
                                .. helper.build .. "/ephd --listen 127.0.0.1:1")
            assert.is_not.equals(0, rc)
            assert.truthy(out:find("QUEEN_EPHEMERAL_LEASE_S", 1, true), bad)
        end
        -- The range, not "in range".
        local out = helper.run("QUEEN_EPHEMERAL_MAX_GROUPS=5000 "
                               .. helper.build .. "/ephd --listen 127.0.0.1:1")
        assert.truthy(out:find("QUEEN_EPHEMERAL_MAX_GROUPS=5000 is not usable:"
                               .. " expected a whole number from 1 to 4096",
                               1, true), out)
    end)

    it("stops at boot on a relay knob it cannot use, naming it", function()
        for _, bad in ipairs({ "QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS=99",
                               "QUEEN_EPHEMERAL_RELAY_MAX_CONNS=0",
                               "QUEEN_EPHEMERAL_RELAY_MAX_PARKED=x",
                               "QUEEN_EPHEMERAL_RELAY_MAX_QUEUED=-1",
                               "QUEEN_EPHEMERAL_RELAY_MAX_IDLE=65537",
                               "QUEEN_EPHEMERAL_RELAY_RESOLVE_TTL_MS=1.5" }) do
            local out, rc = helper.run(bad .. " " .. helper.build
                                       .. "/ephd --listen 127.0.0.1:1")
            assert.is_not.equals(0, rc)
            assert.truthy(out:find(bad:match("^[%w_]+"), 1, true), bad)
        end
        -- The relay closes its idle connections before its peers would.
        local out, rc = helper.run("QUEEN_EPHEMERAL_IDLE_TIMEOUT_S=10 "
            .. "QUEEN_EPHEMERAL_RELAY_IDLE_TIMEOUT_MS=10000 " .. helper.build
            .. "/ephd --listen 127.0.0.1:1")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("QUEEN_EPHEMERAL_RELAY_IDLE_TIMEOUT_MS=10000 "
                               .. "is not usable", 1, true), out)
    end)

    it("stops at boot on a policy directory that does not load", function()
        local out, rc = helper.run(helper.build .. "/ephd --listen 127.0.0.1:1 "
                            .. "--policy-dir /nonexistent")
        assert.is_not.equals(0, rc)
        assert.truthy(out:find("/nonexistent", 1, true))
    end)

    it("stops on SIGTERM within a second, answering parked polls", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=q&wait=true&timeout=60000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        local took = d:stop()
        assert.is_true(took < 1, "took " .. took .. " s")
        local res = c:receive(2)
        assert.equals(200, res.status)
        assert.same({}, res.json.messages)
        c:close()
    end)

    it("stops on SIGINT too", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        os.execute("kill -INT " .. d.pid)
        d:await_exit(2)
        d:stop()
    end)
end)

describe("the probes", function()
    it("answer health and readiness without credentials or a ladder",
       function()
        local d = daemon.start({ args = { "--policy-dir " .. helper.root
            .. "/examples/policies/bearer-tokens" } })
        finally(function() d:stop() end)
        -- Everything else wants a bearer token here.
        assert.equals(401, d:request("GET", "/api/v1/ephemeral/queues").status)
        local res = d:request("GET", "/health")
        assert.equals(200, res.status)
        assert.equals("ok", res.json.status)
        res = d:request("GET", "/ready")
        assert.equals(200, res.status)
        assert.same({ ready = true,
                      policy = { name = "bearer-tokens", version = 1 },
                      database = "none" }, res.json)
    end)
end)
