local ffi = require("ffi")
local helper = require("helper")
local testing = require("ephd.testing")

local DEFAULT = helper.root .. "/policies/default"

describe("ephd.routes", function()
    local routes

    before_each(function()
        helper.core_double({})
        routes = require("ephd.routes")
    end)

    it("gives every route the contract's level", function()
        local level = {}
        for _, r in ipairs(routes) do level[r.name] = r.level end
        assert.equals("write-only", level.push)
        for _, r in ipairs({ "pop", "ack", "configure", "reset", "delete" }) do
            assert.equals("read-write", level[r], r)
        end
        assert.equals("read-only", level.queues)
        assert.equals("read-only", level.depth)
        -- The placement view: a producer and a consumer both route by it.
        assert.equals("any", level.cell_view)
        for _, r in ipairs({ "system_status", "system_switch",
                             "policy_reload", "metering", "cell",
                             "metrics" }) do
            assert.equals("admin", level[r], r)
        end
        for _, r in ipairs({ "health", "ready", "dashboard", "cell_ready",
                             "cell_leaving" }) do
            assert.is_nil(level[r], r)
        end
    end)

    it("fits the metrics' route slots, numbered in the table's order",
       function()
        local C = require("ephd.core").C
        assert.is_true(#routes <= C.EPHD_ROUTES_MAX)
        local router = require("ephd.router")
        for i, r in ipairs(routes) do
            assert.equals(i, r.id)
            assert.equals(r, router.BY_NAME[r.name])
        end
    end)

    it("refuses a row the rest of the broker could not take", function()
        for _, bad in ipairs({
            { name = "x", method = "GET", path = "/x", class = "nope",
              handler = "x" },
            { name = "x", method = "GET", path = "/x", class = "family",
              handler = "x" }, -- no level
            { name = "x", method = "GET", path = "/x", class = "open",
              level = "admin", handler = "x" },
            { name = "x", method = "GET", path = "/x", class = "system",
              level = "root", handler = "x" },
            { name = "push", method = "GET", path = "/x", class = "open",
              handler = "x" }, -- a name taken
            { name = "x", method = "get", path = "/x", class = "open",
              handler = "x" }, -- C takes capitals only
            { name = "x", method = "POST", path = "/api/v1/ephemeral/push",
              class = "open", handler = "x" }, -- twice on one path
        }) do
            table.insert(routes, bad)
            local ok, err = pcall(require, "ephd.router")
            table.remove(routes)
            package.loaded["ephd.router"] = nil
            assert.is_false(ok, bad.name .. " " .. bad.class)
            assert.truthy(err:find("ephd.routes", 1, true), err)
        end
    end)

    -- What docs/architecture.md promises: a route is one row and its
    -- handler, and the matcher, the metrics' names, HEAD, 405 and the
    -- ladder follow.
    it("serves a route added as one row and its handler", function()
        local respond, answers = helper.responder()
        local named = {}
        helper.core_double({
            ephd_ffi_respond = respond,
            ephd_ffi_metrics_route = function(i, name)
                named[i] = ffi.string(name)
            end,
        })
        routes = require("ephd.routes")
        routes[#routes + 1] = { name = "echo", method = "GET",
                                path = "/api/v1/echo/:queue",
                                level = "read-only", class = "family",
                                handler = "echo" }
        package.loaded["ephd.handlers.echo"] = {
            parse = function() end,
            commit = function(ctx)
                require("ephd.reply").json(ctx.req, 200,
                                           '{"echo":"' .. ctx.param .. '"}')
                return 0
            end,
        }
        local host = require("ephd.host")
        assert(host.init(DEFAULT, testing.read(DEFAULT), DEFAULT,
                         testing.read(DEFAULT)))
        assert.equals("echo", named[#routes])
        for _, method in ipairs({ "GET", "HEAD", "POST" }) do
            local req = helper.request({ method = method,
                                         path = "/api/v1/echo/q%201" })
            helper.slot[0] = req
            host.dispatch()
        end
        package.loaded["ephd.handlers.echo"] = nil
        assert.same({ status = 200, body = '{"echo":"q%201"}' },
                    { status = answers[1].status, body = answers[1].body })
        assert.equals(200, answers[2].status)
        assert.equals(405, answers[3].status)
        assert.equals("Allow: GET, HEAD\r\n", answers[3].headers)
    end)
end)
