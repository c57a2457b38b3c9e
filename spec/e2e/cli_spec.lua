-- The commands of the ephd binary that are not the broker: status and
-- policy test, as an operator types them.
local daemon = require("e2e.daemon")
local helper = require("helper")

local EPHD = helper.build .. "/ephd"

-- Runs a shell command; returns its stdout+stderr and exit status.
local function run(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"exit=$?\"")
    local out = p:read("*a")
    p:close()
    local body, code = out:match("^(.*)exit=(%d+)%s*$")
    return body, tonumber(code)
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
        local out, code = run(EPHD .. " status --url http://127.0.0.1:"
                              .. d.port)
        assert.equals(0, code)
        assert.matches("surface enabled", out)
        assert.matches("QUEUE%s+TIER%s+DEPTH%s+BYTES", out)
        assert.matches("\ncli%-a%s+implicit%s+2%s+7 B%s+1%s+0%s+0/0/0", out)
        assert.matches("\ncli%-b%s+implicit%s+1%s+1 B", out)
    end)

    it("redraws the table with --watch", function()
        local out = run("timeout 1.5 " .. EPHD .. " status --watch "
                        .. "--interval 0.2 --url http://127.0.0.1:" .. d.port)
        local frames = select(2, out:gsub("\27%[H\27%[2J", ""))
        assert.is_true(frames >= 3)
    end)

    it("explains itself and refuses what it does not know", function()
        local out, code = run(EPHD .. " status --help")
        assert.equals(0, code)
        assert.matches("usage: ephd status", out)
        out, code = run(EPHD .. " status --bogus")
        assert.equals(2, code)
        assert.matches("unknown option %-%-bogus", out)
    end)

    it("fails with the reason when no broker answers", function()
        local out, code = run(EPHD .. " status --url http://127.0.0.1:1")
        assert.equals(1, code)
        assert.matches("connection_failed", out)
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
        local out, code = run(EPHD .. " policy test " .. dir)
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
        local out, code = run(EPHD .. " policy test " .. dir)
        assert.is_not.equals(0, code)
        assert.matches("1 failure", out)
    end)

    it("explains itself", function()
        local out, code = run(EPHD .. " policy test --help")
        assert.equals(0, code)
        assert.matches("ephd.testing", out)
    end)
end)
