local cjson = require("cjson")
local errors = require("ephd.errors")

describe("ephd.errors", function()
    it("is the contract's closed taxonomy with its statuses", function()
        assert.same({
            ephemeral_bad_request = 400,
            ephemeral_quota_exceeded = 403,
            feature_gated = 403,
            ephemeral_queue_not_found = 404,
            queue_full = 429,
            rate_limited = 429,
            ephemeral_configure_failed = 500,
            ephemeral_delete_failed = 500,
            ephemeral_unavailable = 503,
            owner_moved = 503,
            ephemeral_forward_failed = 503,
            ephemeral_disabled = 503,
        }, errors.STATUS)
    end)

    -- Beside the family's codes: the access layer's, and the HTTP layer's
    -- for a path that is no route (never the depth read's 404 code).
    it("has codes of its own for identity and for unknown routes", function()
        assert.same({ unauthorized = 401, forbidden = 403 }, errors.ACCESS)
        assert.same({ route_not_found = 404 }, errors.ROUTING)
        assert.equals(404, errors.status("route_not_found"))
        assert.same({ error = "no route /x", code = "route_not_found" },
                    cjson.decode(errors.body("route_not_found", "no route /x")))
    end)

    it("builds {error, code} bodies", function()
        local body = cjson.decode(errors.body("queue_full", 'a "quoted" why'))
        assert.same({ error = 'a "quoted" why', code = "queue_full" }, body)
    end)

    it("refuses to build a body with a code outside the taxonomy", function()
        assert.has_error(function() errors.body("teapot", "x") end)
        assert.is_nil(errors.status("teapot"))
    end)

    it("answers with the code's status unless the caller overrides it",
       function()
        local got
        local function respond(req, status, headers, body, len)
            got = { req, status, headers, body, len }
        end
        errors.answer(respond, "r", "rate_limited", "slow", nil,
                      "Retry-After: 2\r\n")
        assert.equals(429, got[2])
        assert.equals("Retry-After: 2\r\n", got[3])
        assert.equals(#got[4], got[5])
        errors.answer(respond, "r", "ephemeral_bad_request", "x", 405)
        assert.equals(405, got[2])
    end)
end)
