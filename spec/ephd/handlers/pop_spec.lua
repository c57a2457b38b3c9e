local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers.pop", function()
    local answers, calls, pop

    before_each(function()
        local respond
        respond, answers = helper.responder()
        calls = {}
        helper.core_double({
            ephd_respond = respond,
            ephd_pop = function(_, a)
                calls[#calls + 1] = {
                    tenant = ffi.string(a.tenant, a.tenant_len),
                    queue = ffi.string(a.queue, a.queue_len),
                    partition = a.partition ~= nil
                                and ffi.string(a.partition, a.partition_len)
                                or nil,
                    group = a.group ~= nil and ffi.string(a.group, a.group_len)
                            or nil,
                    batch = a.batch, timeout = tonumber(a.timeout_ms),
                    wait = a.wait, auto_ack = a.auto_ack,
                }
                return 0
            end,
        }, { pop_timeout_ms = 30000 })
        pop = require("ephd.handlers.pop")
    end)

    local function run(query)
        pop(helper.request({ query = query }), "t")
        return calls[#calls]
    end

    it("applies the defaults", function()
        assert.same({ tenant = "t", queue = "q", batch = 1, timeout = 30000,
                      wait = 0, auto_ack = 0 }, run("queue=q"))
    end)

    it("passes partition, group and flags through", function()
        local c = run("queue=q&partition=p&group=g&batch=5&wait=true"
                      .. "&timeout=100&autoAck=1")
        assert.same({ tenant = "t", queue = "q", partition = "p", group = "g",
                      batch = 5, timeout = 100, wait = 1, auto_ack = 1 }, c)
    end)

    it("clamps batch to [1, 10000] and timeout to 300000", function()
        assert.equals(1, run("queue=q&batch=0").batch)
        assert.equals(10000, run("queue=q&batch=20000").batch)
        assert.equals(300000, run("queue=q&timeout=999999").timeout)
    end)

    it("answers 400 and never pops on a bad query", function()
        for _, q in ipairs({ "", "queue=q&batch=x", "queue=q&wait=2",
                             "queue=q&timeout=-5", "queue=q&nope=1",
                             "queue=q&group=", "partition=p" }) do
            run(q)
        end
        assert.equals(0, #calls)
        assert.equals(7, #answers)
        for _, a in ipairs(answers) do assert.equals(400, a.status) end
    end)
end)
