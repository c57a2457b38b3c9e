local helper = require("helper")

describe("ephd.router", function()
    local router

    setup(function()
        helper.core_double({})
        router = require("ephd.router")
    end)

    -- name, param on a match; nil, status, message, allow otherwise.
    local function route(method, path)
        local req = helper.request({ method = method, path = path })
        local r, status, message, allow = router.route(req)
        if r then return r.name, r.param and router.param() or nil end
        return nil, status, message, allow and allow:match("^Allow: (.*)\r\n$")
    end

    it("maps every route of the family to its handler", function()
        local cases = {
            { "POST", "/api/v1/ephemeral/push", "push" },
            { "GET", "/api/v1/ephemeral/pop", "pop" },
            { "POST", "/api/v1/ephemeral/ack", "ack" },
            { "POST", "/api/v1/ephemeral/configure", "configure" },
            { "POST", "/api/v1/ephemeral/reset", "reset" },
            { "DELETE", "/api/v1/ephemeral/queue/q", "delete", "q" },
            { "GET", "/api/v1/ephemeral/queues", "queues" },
            { "GET", "/api/v1/ephemeral/queues/a%2Fb/depth", "depth", "a%2Fb" },
        }
        for _, c in ipairs(cases) do
            local name, param = route(c[1], c[2])
            assert.equals(c[3], name)
            assert.equals(c[4], param)
        end
    end)

    it("answers 404 for paths outside the family", function()
        for _, path in ipairs({ "/", "/api/v1/ephemeral", "/api/v1/ephemeral/",
                                "/api/v1/ephemeral/queues/q",
                                "/api/v1/ephemeral/queues/depth",
                                "/api/v1/ephemeral/queues/q/depthx" }) do
            local name, status = route("GET", path)
            assert.is_nil(name)
            assert.equals(404, status)
        end
    end)

    -- A malformed name is the handler's 400: a 404 would read as "no such
    -- route" (or, on the depth read, "no such queue").
    it("routes an empty or many-segment :queue to its handler", function()
        for _, c in ipairs({
            { "DELETE", "/api/v1/ephemeral/queue/", "delete", "" },
            { "DELETE", "/api/v1/ephemeral/queue/a/b", "delete", "a/b" },
            { "DELETE", "/api/v1/ephemeral/queue//", "delete", "/" },
            { "GET", "/api/v1/ephemeral/queues//depth", "depth", "" },
            { "GET", "/api/v1/ephemeral/queues/a/b/depth", "depth", "a/b" },
        }) do
            local name, param = route(c[1], c[2])
            assert.equals(c[3], name)
            assert.equals(c[4], param)
        end
    end)

    it("answers 405 with the allowed methods for a wrong method", function()
        local name, status, _, allow = route("PUT",
                                                    "/api/v1/ephemeral/ack")
        assert.is_nil(name)
        assert.equals(405, status)
        assert.equals("POST", allow)
        _, status, _, allow = route("GET", "/api/v1/ephemeral/queue/x")
        assert.equals(405, status)
        assert.equals("DELETE", allow)
    end)

    it("routes HEAD as GET on the read routes, never on pop", function()
        assert.equals("queues", route("HEAD", "/api/v1/ephemeral/queues"))
        local name, param = route("HEAD",
                                         "/api/v1/ephemeral/queues/q/depth")
        assert.equals("depth", name)
        assert.equals("q", param)
        assert.equals("dashboard", route("HEAD", "/dashboard"))
        local _, status, _, allow = route("HEAD",
                                                 "/api/v1/ephemeral/pop")
        assert.equals(405, status)
        assert.equals("GET", allow)
        _, status, _, allow = route("PUT", "/api/v1/system/ephemeral")
        assert.equals(405, status)
        assert.equals("GET, HEAD, POST", allow)
        _, status = route("HEAD", "/api/v1/ephemeral/push")
        assert.equals(405, status)
    end)
end)
