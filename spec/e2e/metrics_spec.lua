-- GET /metrics: the families a Queen operator expects, present from boot,
-- moving with real traffic.
local daemon = require("e2e.daemon")

local FAMILIES = {
    "queen_ephemeral_messages_total", "queen_ephemeral_dropped_total",
    "queen_ephemeral_bytes", "queen_ephemeral_queues",
    "queen_ephemeral_tenants",
    "queen_ephemeral_parked_polls", "queen_ephemeral_connections",
    "queen_ephemeral_http_requests_total",
    "queen_ephemeral_request_duration_seconds",
    "queen_ephemeral_policy_hook_failures_total",
    "queen_ephemeral_policy_reloads_total",
    "queen_ephemeral_members_live", "queen_ephemeral_forwarded_total",
    "queen_ephemeral_fanout_total", "queen_ephemeral_relay_seconds",
    "queen_ephemeral_refusals_total", "queen_ephemeral_policy_version",
}

local function scrape(d)
    local res = d:request("GET", "/metrics")
    assert.equals(200, res.status)
    assert.truthy(res.headers["content-type"]:find("text/plain", 1, true))
    return res.body
end

local function value(text, series)
    local v = text:match("\n" .. series:gsub("[%-%.%+%[%]%(%)%$%^%%%?%*]",
                                             "%%%0") .. " ([%d%.e%+]+)")
    return tonumber(v)
end

describe("metrics", function()
    it("has every family from boot", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        local text = "\n" .. scrape(d)
        for _, f in ipairs(FAMILIES) do
            assert.truthy(text:find("\n# TYPE " .. f .. " ", 1, true), f)
        end
        assert.equals(0, value(text, 'queen_ephemeral_messages_total{verb="pushed"}'))
        assert.equals(0, value(text, 'queen_ephemeral_request_duration_seconds_count{route="push"}'))
        -- Without a database, a cell of one; nothing relayed.
        assert.equals(1, value(text, "queen_ephemeral_members_live"))
        assert.equals(0, value(text, 'queen_ephemeral_relay_seconds_bucket{le="+Inf"}'))
    end)

    it("counts messages by verb, drops by cause, requests by route",
       function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_RETRY_LIMIT = "1" } })
        finally(function() d:stop() end)
        d:push("m", { "1", "2", "3" })
        d:push("m", { "4" })
        local msgs = d:pop("queue=m&group=g&batch=10").json.messages
        d:ack("m", "g", { { msgs[1].id }, { msgs[2].id },
                          { msgs[3].id, "failed" } })
        d:request("POST", "/api/v1/ephemeral/push", "{")
        d:request("GET", "/nowhere")
        local text = "\n" .. scrape(d)
        assert.equals(4, value(text, 'queen_ephemeral_messages_total{verb="pushed"}'))
        assert.equals(4, value(text, 'queen_ephemeral_messages_total{verb="popped"}'))
        assert.equals(2, value(text, 'queen_ephemeral_messages_total{verb="acked"}'))
        assert.equals(1, value(text, 'queen_ephemeral_dropped_total{cause="retry"}'))
        assert.equals(2, value(text, 'queen_ephemeral_http_requests_total{route="push",status="201"}'))
        assert.equals(1, value(text, 'queen_ephemeral_http_requests_total{route="push",status="400"}'))
        assert.equals(1, value(text, 'queen_ephemeral_http_requests_total{route="none",status="404"}'))
        assert.equals(3, value(text, 'queen_ephemeral_request_duration_seconds_bucket{route="push",le="+Inf"}'))
        assert.equals(3, value(text, 'queen_ephemeral_request_duration_seconds_count{route="push"}'))
        assert.equals(1, value(text, "queen_ephemeral_queues"))
        -- "4" is left, with what its message and names cost besides.
        local listing = d:request("GET", "/api/v1/ephemeral/queues").json
        assert.equals(1, listing.queues[1].bytes)
        assert.equals(listing.cellBytes, value(text, "queen_ephemeral_bytes"))
        assert.is_true(listing.cellBytes > 1)
    end)

    it("shows parked polls while they wait", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        local c = d:connect()
        c:send(daemon.format("GET",
            "/api/v1/ephemeral/pop?queue=p&wait=true&timeout=5000"))
        assert.equals(200, d:request("GET", "/api/v1/ephemeral/queues").status)
        assert.equals(1, value("\n" .. scrape(d),
                               "queen_ephemeral_parked_polls"))
        c:close()
    end)

    it("counts refusals by code, the HTTP layer's and held writes' too",
       function()
        local d = daemon.start({ env = { QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "1" } })
        finally(function() d:stop() end)
        local text = "\n" .. scrape(d)
        for _, c in ipairs(require("ephd.codes").CODES) do
            assert.equals(0, value(text, 'queen_ephemeral_refusals_total{code="'
                                         .. c.code .. '"}'), c.code)
        end
        d:push("full", { "1" })
        d:push("full", { "2" })
        d:push("full", { "3" })
        d:request("POST", "/api/v1/ephemeral/push", "{")
        d:request("GET", "/nowhere")
        d:request("PUT", "/api/v1/ephemeral/push")
        -- No database: a configure is refused by its handler.
        d:request("POST", "/api/v1/ephemeral/configure", '{"queue":"c"}')
        local c = d:connect()
        c:send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\n"
               .. "Content-Length: 999999999999\r\n\r\n")
        c:receive()
        c:close()
        text = "\n" .. scrape(d)
        local function refusals(code)
            return value(text, 'queen_ephemeral_refusals_total{code="' .. code
                               .. '"}')
        end
        assert.equals(2, refusals("queue_full"))
        -- 400, 405 and 413 all carry the shape code.
        assert.equals(3, refusals("ephemeral_bad_request"))
        assert.equals(1, refusals("route_not_found"))
        assert.equals(1, refusals("ephemeral_unavailable"))
        assert.equals(0, refusals("rate_limited"))
    end)

    it("gauges the policy's version, by name", function()
        local d = daemon.start()
        finally(function() d:stop() end)
        assert.equals(1, value("\n" .. scrape(d),
                               'queen_ephemeral_policy_version{name="default"}'))
    end)

    it("lists the deepest queues' depth only behind the flag, bounded by it",
       function()
        -- busted keeps one finally per test: it stops both.
        local off, d
        finally(function()
            if d then d:stop() end
            off:stop()
        end)
        off = daemon.start()
        off:push("deep", { "1" })
        assert.falsy(scrape(off):find("queen_ephemeral_queue_depth", 1, true))
        d = daemon.start({ env = { QUEEN_EPHEMERAL_METRICS_QUEUES = "2" } })
        d:push("one", { "1" })
        d:push("three", { "1", "2", "3" })
        d:push('q"\\', { "1", "2" })
        d:pop("queue=empty")
        local text = "\n" .. scrape(d)
        local T = "00000000-0000-0000-0000-000000000001"
        assert.equals(3, value(text, 'queen_ephemeral_queue_depth{tenant="' .. T
                                     .. '",queue="three"}'))
        assert.equals(2, value(text, 'queen_ephemeral_queue_depth{tenant="' .. T
                                     .. '",queue="q\\"\\\\"}'))
        local _, series = text:gsub("\nqueen_ephemeral_queue_depth{", "")
        assert.equals(2, series)
    end)
end)
