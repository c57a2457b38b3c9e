local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")

-- The system routes' handlers (admin): the surface, reload, the cell's
-- view, metering, metrics.
describe("the system routes", function()
    local h, answers, reloads, scraped

    before_each(function()
        local respond
        respond, answers = helper.responder()
        reloads = 0
        scraped = {}
        local C
        C = helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_wall_time = function() return 1000 end,
            ephd_ffi_policy_reload = function()
                reloads = reloads + 1
                return reloads == 1 and C.EPHD_HELD or C.EPHD_E_UNAVAILABLE
            end,
            ephd_ffi_cell = function(cell)
                cell.members, cell.live, cell.self = 2, 1, 1
                cell.database, cell.fresh, cell.ttl_ms = 1, 0, 300
                cell.partitions_held, cell.partitions_owned = 9, 4
            end,
            ephd_ffi_cell_member = function(i, m)
                if i >= 2 then return C.EPHD_E_NOT_FOUND end
                ffi.copy(m.id, i == 0 and "00000000000000aa"
                               or "00000000000000bb")
                m.address.ptr = i == 0 and "http://a:1" or "http://b:2"
                m.address.len = 10
                m.epoch, m.live = 0xabc + i, i
                m.ttl_ms, m.seen_ms_ago = 4000, 5000 - 4000 * i
                return C.EPHD_OK
            end,
            ephd_ffi_metrics = function(_, arr, n)
                for i = 0, n - 1 do
                    local m, labels = arr[i], {}
                    for l = 0, 1 do
                        if m.label[l].ptr ~= nil then
                            labels[#labels + 1] = ffi.string(m.label[l].ptr,
                                                             m.label[l].len)
                        end
                    end
                    scraped[#scraped + 1] = { tonumber(m.family), m.value,
                                              table.concat(labels, " ") }
                end
            end,
            ephd_ffi_tenant_next = function(pos, name, stats)
                if pos[0] > 0 then return -3 end
                pos[0] = 1
                name.ptr, name.len = "t1", 2
                stats.pushed, stats.delivered = 5, 7
                return 0
            end,
        })
        require("ephd.hooks").active = { name = "p", version = 3, hooks = {} }
        require("ephd.killswitch").set(false)
        h = {}
        for _, m in ipairs({ "surface", "reload", "cell", "metering",
                             "metrics" }) do
            h[m] = require("ephd.handlers." .. m)
        end
    end)

    local function run(h, t)
        local ctx = helper.ctx(t)
        local err = h.parse(ctx)
        if err then return nil, err end
        return h.commit(ctx)
    end

    it("pauses and unpauses the surface", function()
        run(h.surface.switch, { body = '{"enabled":false,"retryAfter":9}' })
        local s = cjson.decode(answers[1].body)
        assert.is_false(s.enabled)
        assert.equals(9, s.retryAfter)
        assert.is_true(require("ephd.killswitch").state().paused)
        run(h.surface.status, {})
        assert.is_false(cjson.decode(answers[2].body).enabled)
        run(h.surface.switch, { body = '{"enabled":true}' })
        assert.is_true(cjson.decode(answers[3].body).enabled)
    end)

    it("refuses a switch body of the wrong shape", function()
        for _, b in ipairs({ '{}', '{"enabled":"no"}',
                             '{"enabled":false,"retryAfter":0}',
                             '{"enabled":false,"retryAfter":1.5}',
                             '{"enabled":false,"why":"x"}' }) do
            assert.is_nil((run(h.surface.switch, { body = b })), b)
        end
    end)

    it("starts one reload at a time", function()
        run(h.reload, {})
        run(h.reload, {})
        assert.equals(2, reloads)
        assert.equals(1, #answers)
        assert.equals(503, answers[1].status)
    end)

    it("shows the cell as C reads it, this broker named by its row",
       function()
        assert.truthy(run(h.cell.view, {}))
        local c = cjson.decode(answers[1].body)
        assert.same({ id = "00000000000000bb", address = "http://b:2",
                      epoch = "00000abd" }, c.self)
        assert.same({ id = "00000000000000aa", address = "http://a:1",
                      epoch = "00000abc", live = false, ttlMs = 4000,
                      seenMsAgo = 5000 }, c.members[1])
        assert.is_true(c.members[2].live)
        assert.equals(2, #c.members)
        assert.equals(1, c.live)
        assert.equals(300, c.ttlMs)
        assert.is_false(c.fresh)
        assert.is_true(c.database)
        assert.same({ held = 9, owned = 4 }, c.partitions)
        assert.is_nil(run(h.cell.view, { query = "x=1" }))
    end)

    it("lists every tenant's counters", function()
        run(h.metering, {})
        local t = cjson.decode(answers[1].body).tenants[1]
        assert.equals("t1", t.tenant)
        assert.equals(5, t.pushed)
        assert.equals(7, t.delivered)
        assert.truthy(ffi)
    end)

    -- C writes the page (core/metrics.c); Lua hands it numbers and label
    -- values only, each family's in its order.
    it("hands C the policy's and the shadow's samples for /metrics",
       function()
        local C = require("ephd.core").C
        local hooks = require("ephd.hooks")
        hooks.failures.cost = 2
        hooks.reloads.ok, hooks.reloads.refused = 4, 1
        local shadow = require("ephd.shadow")
        shadow.disabled_total = 3
        assert.equals(0, run(h.metrics, {}))
        local want = {}
        for _, hook in ipairs(require("ephd.policy").HOOKS) do
            want[#want + 1] = { tonumber(C.EPHD_METRIC_HOOK_FAILURES),
                                hook == "cost" and 2 or 0, hook }
        end
        want[#want + 1] = { tonumber(C.EPHD_METRIC_POLICY_RELOADS), 4, "ok" }
        want[#want + 1] = { tonumber(C.EPHD_METRIC_POLICY_RELOADS), 1,
                            "refused" }
        want[#want + 1] = { tonumber(C.EPHD_METRIC_POLICY_VERSION), 3, "p" }
        want[#want + 1] = { tonumber(C.EPHD_METRIC_SHADOW_DISABLED), 3, "" }
        assert.same(want, scraped)
        assert.is_nil(run(h.metrics, { query = "x=1" }))
    end)
end)
