-- Numbers from policy hooks are checked before they reach a bucket or a
-- header: NaN and the infinities compare false with everything, so a
-- check of the form `x < 0` lets them through, and one NaN in a bucket
-- refuses its tenant until a restart (Retry-After: nan).
local cjson = require("cjson")
local helper = require("helper")

local T = "00000000-0000-0000-0000-000000000001"

describe("numbers from hooks", function()
    local ladder, answers, hooks, rate, answer

    before_each(function()
        local respond
        respond, answers = helper.responder()
        helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_now_ms = function() return 1000ULL end,
        }, { rate = 10, burst = 10 })
        hooks = require("ephd.hooks")
        hooks.active = { hooks = {
            cost = function(push) return answer.cost or push.messages end,
            paused = function() return answer.paused end,
            limits = function(_, _, d) return d end,
        }, guarded = {} }
        ladder = require("ephd.ladder")
        rate = require("ephd.rate")
        rate.reset()
        answer = {}
    end)

    local function push()
        local req, anchor = helper.request({})
        local committed = false
        ladder.run({
            req = req, anchor = anchor, route = helper.route("push"),
            family = true,
            handler = {
                parse = function(ctx)
                    ctx.messages, ctx.bytes = 1, 1
                end,
                commit = function()
                    committed = true
                    return 0
                end,
            },
        })
        local a = answers[#answers]
        answers[#answers] = nil
        return a and cjson.decode(a.body).code, a, committed
    end

    for what, cost in pairs({ NaN = 0 / 0, infinity = math.huge,
                              ["minus infinity"] = -math.huge }) do
        it("answers 503 for a cost of " .. what .. ", bucket untouched",
           function()
            answer.cost = cost
            local code, _, committed = push()
            assert.equals("ephemeral_unavailable", code)
            assert.is_false(committed)
            -- The tenant's next honest push takes its ten tokens.
            answer.cost = 10
            assert.is_nil((push()))
            answer.cost = 1
            local refused, a = push()
            assert.equals("rate_limited", refused)
            assert.equals("Retry-After: 1\r\n", a.headers)
        end)
    end

    for what, after in pairs({ NaN = 0 / 0, infinity = math.huge,
                               ["past a day"] = 86401 }) do
        it("answers 503 for paused returning " .. what, function()
            answer.paused = after
            local code, a = push()
            assert.equals("ephemeral_unavailable", code)
            assert.is_nil(a.headers)
        end)
    end

    it("passes a paused answer within a day as whole seconds", function()
        answer.paused = 1.5
        local code, a = push()
        assert.equals("ephemeral_disabled", code)
        assert.equals("Retry-After: 2\r\n", a.headers)
    end)

    it("answers 503 for limits of NaN, creating no bucket", function()
        hooks.active.hooks.limits = function() return { rate = 0 / 0 } end
        assert.equals("ephemeral_unavailable", (push()))
        hooks.active.hooks.limits = function(_, _, d) return d end
        assert.is_nil((push()))
    end)
end)
