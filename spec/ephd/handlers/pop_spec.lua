local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers.pop", function()
    local calls, pop, refuse_with

    before_each(function()
        calls = {}
        refuse_with = nil
        local C
        C = helper.core_double({
            ephd_ffi_pop = function(req)
                local a = req.op.pop
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
                    max_parked = tonumber(a.limits.max_parked),
                }
                if refuse_with then
                    req.op.refusals = refuse_with
                    return C.EPHD_E_REFUSED
                end
                return 0
            end,
        }, { pop_timeout_ms = 30000 })
        pop = require("ephd.handlers.pop")
    end)

    local function run(query, limits)
        local ctx = helper.ctx({ query = query }, "t", limits)
        local err = pop.parse(ctx)
        if err then return nil, err end
        return pop.commit(ctx), calls[#calls]
    end

    it("applies the defaults", function()
        local _, c = run("queue=q")
        assert.same({ tenant = "t", queue = "q", batch = 1, timeout = 30000,
                      wait = 0, auto_ack = 0, max_parked = 0 }, c)
    end)

    it("passes partition, group, flags and the parked ceiling", function()
        local _, c = run("queue=q&partition=p&group=g&batch=5&wait=true"
                         .. "&timeout=100&autoAck=1", { max_parked = 7 })
        assert.same({ tenant = "t", queue = "q", partition = "p", group = "g",
                      batch = 5, timeout = 100, wait = 1, auto_ack = 1,
                      max_parked = 7 }, c)
    end)

    it("commits on delivery under either name, either true", function()
        for q, want in pairs({
            ["queue=q&commitOnDelivery=true"] = 1,
            ["queue=q&autoAck=yes"] = 1,
            ["queue=q&commitOnDelivery=no&autoAck=1"] = 1,
            ["queue=q&commitOnDelivery=1&autoAck=false"] = 1,
            ["queue=q&commitOnDelivery=0&autoAck=no"] = 0,
        }) do
            assert.equals(want, select(2, run(q)).auto_ack, q)
        end
    end)

    it("reads booleans as Queen spells them and ignores unknown "
       .. "parameters", function()
        assert.equals(1, select(2, run("queue=q&wait=yes")).wait)
        assert.equals(0, select(2, run("queue=q&wait=no")).wait)
        assert.equals(1, select(2, run("queue=q&wait=1&sdkVersion=9")).wait)
    end)

    it("clamps batch to [1, 10000] and timeout to 300000", function()
        assert.equals(1, select(2, run("queue=q&batch=0")).batch)
        assert.equals(10000, select(2, run("queue=q&batch=20000")).batch)
        assert.equals(300000,
                      select(2, run("queue=q&timeout=999999")).timeout)
    end)

    it("reads an empty partition or group as absent, as Queen", function()
        local _, c = run("queue=q&partition=&group=")
        assert.same({ tenant = "t", queue = "q", batch = 1, timeout = 30000,
                      wait = 0, auto_ack = 0, max_parked = 0 }, c)
    end)

    it("returns a shape refusal and never pops on a bad query", function()
        for _, q in ipairs({ "", "queue=q&batch=x", "queue=q&wait=2",
                             "queue=q&timeout=-5", "queue=q&autoAck=on",
                             "queue=q&commitOnDelivery=TRUE",
                             "queue=q&group=a%01b", "partition=p" }) do
            local ok, err = run(q)
            assert.is_nil(ok)
            assert.is_string(err)
        end
        assert.equals(0, #calls)
    end)

    it("hands a refusal's bits back to the ladder", function()
        refuse_with = 16
        assert.equals(16, (run("queue=q&wait=true")))
    end)
end)
