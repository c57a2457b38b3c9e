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
end)
