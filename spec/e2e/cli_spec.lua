-- The commands of the ephd binary that are not the broker: status, the
-- verbs (push, pop, ack) and policy test, as an operator types them.
local daemon = require("e2e.daemon")
local helper = require("helper")
local client = require("ephd.client")

local EPHD = helper.build .. "/ephd"

-- --watch's frames as a pipe or a file gets them: each after a line of
-- the time and the URL, with no screen-clearing codes.
local function frames(out)
    local starts, list = {}, {}
    for at in ("\n" .. out):gmatch("\n()%d%d:%d%d:%d%d  http://[^\n]*\n") do
        starts[#starts + 1] = at - 1
    end
    for i, at in ipairs(starts) do
        list[i] = out:sub(at, (starts[i + 1] or #out + 1) - 1)
    end
    return list
end

-- `ephd status --watch ARGS` in the background, its frames read from a
-- file as they come; stop() ends it.
local function watch(args)
    local file = os.tmpname()
    local sh = io.popen(EPHD .. " status --watch --interval 0.2" .. args
                        .. " >" .. file .. " 2>&1 & echo $!")
    local pid = assert(tonumber(sh:read("*l")))
    sh:close()
    local w = {}
    function w.frames()
        local f = assert(io.open(file))
        local out = f:read("*a")
        f:close()
        return frames(out)
    end
    -- The first whole frame (one another has followed) matching pattern.
    function w.await(what, pattern)
        local found
        daemon.wait_until(what, function()
            local seen = w.frames()
            for i = 1, #seen - 1 do
                if seen[i]:find(pattern) then found = seen[i] end
            end
            return found
        end)
        return found
    end
    function w.stop()
        os.execute("kill " .. pid .. " 2>/dev/null")
        os.remove(file)
    end
    return w
end

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

describe("ephd status", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    it("prints the tenant's queues as a table", function()
        d:push("cli-a", { '"xy"', '"z"' }, "p1")
        d:push("cli-b", { "1" })
        local out, code = helper.run(EPHD .. " status --url http://127.0.0.1:"
                              .. d.port)
        assert.equals(0, code)
        assert.matches("surface enabled", out)
        assert.matches("QUEUE%s+TIER%s+DEPTH%s+BYTES", out)
        assert.matches("\ncli%-a%s+implicit%s+2%s+7 B%s+1%s+0%s+0%s+0/0/0",
                       out)
        assert.matches("\ncli%-b%s+implicit%s+1%s+1 B", out)
    end)

    it("redraws the table with --watch", function()
        local out = helper.run("timeout 1.5 " .. EPHD .. " status --watch "
                        .. "--interval 0.2 --url http://127.0.0.1:" .. d.port)
        assert.is_true(#frames(out) >= 3, out)
        assert.is_nil(out:find("\27", 1, true))
    end)

    it("ends --watch when its output is closed", function()
        -- head leaves after two lines; the watch must notice and exit 0,
        -- not draw into a closed pipe until killed.
        local t0 = daemon.now()
        local out, code = helper.run("timeout 10 bash -c '" .. EPHD
            .. " status --watch --url http://127.0.0.1:" .. d.port
            .. " | head -2; exit ${PIPESTATUS[0]}'")
        assert.equals(0, code, out)
        assert.matches("^%d%d:%d%d:%d%d  http://127.0.0.1:" .. d.port
                       .. "\nbroker ", out)
        assert.is_true(daemon.now() - t0 < 5)
    end)

    it("ends --watch started with no stdout, writing nothing to the "
       .. "broker", function()
        -- Started with fd 1 closed (`>&-`), its first socket took fd 1:
        -- each frame went to the broker as a request, and it never ended.
        local b = daemon.start({ env = {
            QUEEN_EPHEMERAL_LOG_REFUSALS = "true" } })
        finally(function() b:stop() end)
        local t0 = daemon.now()
        local out, code = helper.run("timeout 10 bash -c '" .. EPHD
            .. " status --watch --interval 0.2 --url http://127.0.0.1:"
            .. b.port .. " >&-'")
        assert.equals(0, code, out)
        assert.is_true(daemon.now() - t0 < 5)
        assert.is_nil(b:read_log():find("event=refused", 1, true),
                      b:read_log())
    end)

    it("explains itself and refuses what it does not know", function()
        local out, code = helper.run(EPHD .. " status --help")
        assert.equals(0, code)
        assert.matches("usage: ephd status", out)
        out, code = helper.run(EPHD .. " status --bogus")
        assert.equals(2, code)
        assert.matches("unknown option %-%-bogus", out)
    end)

    it("fails with the reason and the URL when no broker answers",
       function()
        local out, code = helper.run(EPHD .. " status --url http://127.0.0.1:1")
        assert.equals(1, code)
        assert.matches("connection_failed", out)
        assert.truthy(out:find("http://127.0.0.1:1", 1, true))
    end)

    it("shows this broker's bytes and ceiling, the policy and the tenant's "
       .. "counters", function()
        local out, code = helper.run(EPHD .. " status --url http://127.0.0.1:"
                              .. d.port)
        assert.equals(0, code)
        -- The answering broker's footprint, not its cell's sum.
        assert.matches("this broker's bytes [%d.]+ K?i?B of 256%.0 MiB  "
                       .. "surface enabled  policy default v1", out)
        assert.matches("tenant 00000000%-0000%-0000%-0000%-000000000001  "
                       .. "pushed %d+  delivered %d+  parked 0", out)
    end)

    it("says which broker answered", function()
        local out, code = helper.run(EPHD .. " status --url http://127.0.0.1:"
                              .. d.port)
        assert.equals(0, code)
        local v = d:cell()
        assert.truthy(out:find(("broker %s at http://127.0.0.1:%d epoch %s  "
                                .. "cell 1 live, owns %d of %d partitions "
                                .. "held\n"):format(v.self.id, d.port,
                                    v.self.epoch, v.partitions.owned,
                                    v.partitions.held), 1, true), out)
        -- Without admin, the URL it asked.
        local t = daemon.start({ env = { QUEEN_TENANCY_HEADER = "true",
                                         QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" } })
        finally(function() t:stop() end)
        out = helper.run(EPHD .. " status --tenant "
                         .. "00000000-0000-0000-0000-000000000002 --url "
                         .. "http://127.0.0.1:" .. t.port)
        assert.truthy(out:find("broker http://127.0.0.1:" .. t.port
                               .. " (its id needs admin)", 1, true), out)
    end)

    it("shows the kill switch and the whole table while paused", function()
        local url = " --url http://127.0.0.1:" .. d.port
        -- The watch draws a table, then the pause comes.
        local w = watch(url)
        -- busted keeps one finally per test: the last one given.
        finally(function()
            w.stop()
            d:request("POST", "/api/v1/system/ephemeral", '{"enabled":true}')
        end)
        w.await("a frame listing cli-a", "\ncli%-a%s")
        assert.equals(200, d:request("POST", "/api/v1/system/ephemeral",
            '{"enabled":false,"retryAfter":9,"reason":"maintenance"}').status)
        -- The family's listing refuses, as the contract says; the
        -- operator's (GET /api/v1/system/queues) answers.
        assert.refused_with("ephemeral_disabled",
                            d:request("GET", "/api/v1/ephemeral/queues"))
        local out, code = helper.run(EPHD .. " status" .. url)
        assert.equals(0, code)
        assert.matches("surface PAUSED: maintenance %(since %d%d:%d%d:%d%d, "
                       .. "retry after 9 s%)  policy default v1", out)
        assert.matches("\ncli%-a%s+implicit%s+2%s+7 B", out)
        assert.not_matches("refused", out)
        local last = w.await("a frame of the pause", "surface PAUSED")
        assert.matches("surface PAUSED: maintenance", last)
        assert.matches("\ncli%-a%s+implicit", last)
        assert.not_matches("as of", last)
    end)

    it("shows parked consumers per queue and the tenant's rate limit",
       function()
        local c = d:connect()
        finally(function() c:close() end)
        c:send(daemon.format("GET", "/api/v1/ephemeral/pop?queue=cli-p"
                             .. "&group=g&wait=true&timeout=5000"))
        d:await_parked(1)
        local out = helper.run(EPHD .. " status --url http://127.0.0.1:"
                               .. d.port)
        assert.matches("QUEUE%s+TIER%s+DEPTH%s+BYTES%s+PARTS%s+GROUPS%s+"
                       .. "PARKED%s+DROPS", out)
        assert.matches("\ncli%-p%s+implicit%s+0%s+0 B%s+0%s+1%s+1%s+0/0/0",
                       out)
        assert.matches("parked 1  rate 5000/s burst 10000", out)
    end)
end)

describe("ephd status without admin, paused", function()
    it("shows the switch and keeps the last table watching", function()
        local d = daemon.start({
            args = { "--policy-dir " .. helper.root
                     .. "/examples/policies/bearer-tokens" },
            env = { QUEEN_TENANCY_HEADER = "true",
                    QUEEN_EPHEMERAL_REQUIRE_GRANT = "false" } })
        local w
        -- busted keeps one finally per test: the last one given.
        finally(function()
            if w then w.stop() end
            d:stop()
        end)
        local ADMIN = { Authorization = "Bearer admin-token" }
        local READER = { Authorization = "Bearer dashboard-token" }
        assert.equals(201, d:push("cli-r", { "1" }, nil,
            { Authorization = "Bearer producer-token" }).status)
        -- A refusal names the broker that refused, and why.
        local out = helper.run(EPHD .. " status --token nope --url "
                               .. "http://127.0.0.1:" .. d.port)
        assert.equals("ephd status: http://127.0.0.1:" .. d.port
                      .. " answered unauthorized (401): unknown token\n", out)
        local url = " --token dashboard-token --url http://127.0.0.1:"
                    .. d.port
        w = watch(url)
        w.await("a frame listing cli-r", "\ncli%-r%s")
        assert.equals(200, d:request("POST", "/api/v1/system/ephemeral",
            '{"enabled":false,"reason":"maintenance"}', ADMIN).status)
        assert.refused_with("forbidden", d:request("GET",
            "/api/v1/system/queues", nil, READER))
        out = helper.run(EPHD .. " status" .. url)
        assert.matches("no listing: while the surface is paused", out)
        local last = w.await("a frame of the pause", "surface PAUSED")
        assert.matches("surface PAUSED: maintenance", last)
        assert.matches("\ncli%-r%s+implicit", last)
        assert.matches("%(as of %d%d:%d%d:%d%d: the listing is refused "
                       .. "while the surface is paused%)", last)
    end)
end)

describe("ephd status as an admin whose tenant has no grant", function()
    it("lists from the operator's route instead of feature_gated",
       function()
        -- Tenancy headers turn grants on: admin-token's own tenant has
        -- none, and the family refuses it; the operator's view must not.
        daemon.sql("TRUNCATE queen.ephemeral_quota")
        local d = daemon.start({ db = true,
            args = { "--policy-dir " .. helper.root
                     .. "/examples/policies/bearer-tokens" },
            env = { QUEEN_TENANCY_HEADER = "true" } })
        finally(function()
            d:stop()
            daemon.sql("TRUNCATE queen.ephemeral_quota")
        end)
        local ADMIN = { Authorization = "Bearer admin-token" }
        local OTHER = "22222222-2222-2222-2222-222222222222"
        assert.refused_with("feature_gated",
            d:request("GET", "/api/v1/ephemeral/queues", nil, ADMIN))
        assert.equals(200, d:request("POST", "/api/v1/system/grants",
            '{"tenant":"' .. OTHER .. '"}', ADMIN).status)
        assert.equals(201, d:push("cli-g", { "1" }, nil,
            { Authorization = "Bearer other-tenant-token" }).status)
        local url = " --token admin-token --url http://127.0.0.1:" .. d.port
        local out, code = helper.run(EPHD .. " status" .. url)
        assert.equals(0, code, out)
        assert.matches("0 queues", out)
        assert.matches("(no queues)", out, 1, true)
        out, code = helper.run(EPHD .. " status --tenant " .. OTHER .. url)
        assert.equals(0, code, out)
        assert.matches("\ncli%-g%s+implicit%s+1%s+1 B", out)
        -- A token without admin is refused as before, saying why.
        out, code = helper.run(EPHD .. " status --token dashboard-token "
                               .. "--url http://127.0.0.1:" .. d.port)
        assert.equals(1, code)
        assert.matches("feature_gated", out)
    end)
end)

describe("ephd push, pop and ack", function()
    local d, url
    lazy_setup(function()
        d = daemon.start({ env = { QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "5" } })
        url = " --url http://127.0.0.1:" .. d.port
    end)
    lazy_teardown(function() d:stop() end)

    local function ephd(args, stdin)
        return helper.run((stdin and ("printf '" .. stdin .. "' | ") or "") .. EPHD
                   .. " " .. args .. url)
    end

    it("pushes JSON as JSON and the rest as strings, pops them as pushed",
       function()
        local out, code = ephd([[push v-1 '{"a": [1.50]}' 2 -3 hello '']])
        assert.equals(0, code, out)
        assert.equals("pushed 5\n", out)
        out, code = ephd("pop v-1 --batch 10 --commit-on-delivery")
        assert.equals(0, code)
        local lines = {}
        for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
        assert.equals(5, #lines)
        assert.matches("^e:%x+:Default:1\tDefault\t0\t{\"a\": %[1%.50%]}$",
                       lines[1])
        assert.matches("\t2$", lines[2])
        assert.matches("\t%-3$", lines[3])
        assert.matches('\t"hello"$', lines[4])
        assert.matches('\t""$', lines[5])
        out = ephd("push v-1 --string 7")
        assert.equals("pushed 1\n", out)
        out = ephd("pop v-1 --json")
        assert.matches('^{"queue":"v%-1","messages":%[{"id":"e:%x+:Default:6",'
                       .. '"partition":"Default","attempts":0,'
                       .. '"payload":"7"}%]}\n$', out)
    end)

    it("pushes stdin's lines, to a partition", function()
        local out, code = ephd("push v-2 --partition p --json", "1\\nx\\n")
        assert.equals(0, code, out)
        assert.equals('{"pushed":2}\n', out)
        -- --ack: --commit-on-delivery's older name.
        out = ephd("pop v-2 --batch 5 --ack")
        assert.matches("^e:%x+:p:%d+\tp\t0\t1\ne:%x+:p:%d+\tp\t0\t\"x\"\n$",
                       out)
    end)

    it("pipes a group's pop into ack, and retries by status", function()
        ephd("push v-3 1 2")
        local out, code = helper.run(EPHD .. " pop v-3 --group g --batch 2" .. url
                              .. " | " .. EPHD .. " ack v-3 --group g" .. url)
        assert.equals(0, code, out)
        assert.matches("^e:%x+:Default:%d+\tacked\n"
                       .. "e:%x+:Default:%d+\tacked\n$", out)
        ephd("push v-3 3")
        local id = ephd("pop v-3 --group g"):match("^[^\t]+")
        out = ephd("ack v-3 --group g --status retry --json " .. id)
        assert.equals('{"results":[{"id":"' .. id
                      .. '","outcome":"redelivered"}]}\n', out)
        out = ephd("pop v-3 --group g")
        assert.matches("\t1\t3\n$", out) -- the second attempt
        out = ephd("ack v-3 --group g e:00000000:Default:1 " .. id)
        assert.matches("e:00000000:Default:1\tstale\n", out)
    end)

    it("waits with --wait, and says when nothing came", function()
        local t0 = daemon.now()
        local out, code = ephd("pop v-4 --wait 0.3")
        assert.equals(0, code)
        assert.equals("(no messages)\n", out)
        assert.is_true(daemon.now() - t0 >= 0.25)
        out = ephd("pop v-4 --wait=0.3 --json")
        assert.equals('{"queue":"v-4","messages":[]}\n', out)
    end)

    it("names the URL, the code and the wait in a refusal", function()
        ephd("push v-5 1 2 3 4 5")
        local out, code = ephd("push v-5 6")
        assert.equals(1, code)
        assert.truthy(out:find("ephd push: http://127.0.0.1:" .. d.port
                               .. " answered queue_full (429): ", 1, true),
                      out)
        assert.matches("; retry in 1 s\n$", out)
        out, code = ephd("pop ''")
        assert.equals(1, code)
        assert.matches("ephemeral_bad_request %(400%)", out)
    end)

    it("says how long a push above the burst waits for a full bucket",
       function()
        local b = daemon.start({ env = { QUEEN_EPHEMERAL_RATE = "1",
                                         QUEEN_EPHEMERAL_BURST = "2" } })
        finally(function() b:stop() end)
        local push = EPHD .. " push v-b 1 2 3 --url http://127.0.0.1:" .. b.port
        -- From a full bucket it passes, one in debt; the next waits -1 to 2
        -- at one a second.
        local _, code = helper.run(push)
        assert.equals(0, code)
        local out
        out, code = helper.run(push)
        assert.equals(1, code)
        assert.equals("ephd push: http://127.0.0.1:" .. b.port .. " answered "
                      .. "rate_limited (429): the tenant is over its rate of "
                      .. "1 message per second; this push costs 3, more than "
                      .. "its burst of 2: it passes from a full bucket; "
                      .. "retry in 3 s\n", out)
        local c = client.new({ url = "http://127.0.0.1:" .. b.port })
        local ok, err = c:push("v-b", { 1, 2, 3 })
        assert.is_nil(ok)
        assert.is_true(client.retryable(err))
        assert.equals(3, err.retry_after)
        c:close()
    end)

    it("refuses a command line it cannot use, with its synopsis", function()
        for _, args in ipairs({ "pop", "pop q --batch 0", "pop q --wait 301",
                                "pop q --bogus", "ack q --status done x",
                                "push q --partition" }) do
            local out, code = ephd(args)
            assert.equals(2, code, args)
            assert.matches("usage: ephd %a+ QUEUE", out)
        end
        local out, code = helper.run(EPHD .. " pop --help")
        assert.equals(0, code)
        assert.matches("%-%-wait %[SECONDS%]", out)
        out, code = helper.run(EPHD .. " push q x --url localhost:6632")
        assert.equals(2, code)
        assert.matches("ephd push: url must be http://host%[:port%]", out)
        out, code = helper.run(EPHD .. " frobnicate")
        assert.equals(2, code)
        assert.matches("unknown command frobnicate", out)
    end)
end)

describe("ephd policy test", function()
    local dir
    before_each(function()
        dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir .. "/spec"))
        write(dir .. "/init.lua", [[
return { name = "tiny", version = 1, hooks = {
    cost = function(push) return push.messages * 2 end,
} }]])
    end)
    after_each(function() os.execute("rm -rf " .. dir) end)

    it("runs the directory's specs against its hooks", function()
        write(dir .. "/spec/cost_spec.lua", [[
local p = assert(require("ephd.testing").load())
describe("tiny", function()
    it("doubles", function()
        assert.equals(6, p:cost({ messages = 3, bytes = 9 }))
    end)
end)]])
        local out, code = helper.run(EPHD .. " policy test " .. dir)
        assert.equals(0, code)
        assert.matches("1 success / 0 failures", out)
    end)

    it("fails when a spec fails", function()
        write(dir .. "/spec/cost_spec.lua", [[
local p = assert(require("ephd.testing").load())
describe("tiny", function()
    it("triples", function()
        assert.equals(9, p:cost({ messages = 3, bytes = 9 }))
    end)
end)]])
        local out, code = helper.run(EPHD .. " policy test " .. dir)
        assert.is_not.equals(0, code)
        assert.matches("1 failure", out)
    end)

    it("explains itself", function()
        local out, code = helper.run(EPHD .. " policy test --help")
        assert.equals(0, code)
        assert.matches("ephd.testing", out)
    end)
end)
