-- Configures in flight: a configure of a new queue is checked against the
-- tenant's queue allowance and the byte budgets before its database write
-- and applied after it, so what it will create is reserved in between.
-- Without that, configures sent together all passed an allowance with room
-- for one and every one of their rows was written.
local daemon = require("e2e.daemon")

local CONFIGURE = "/api/v1/ephemeral/configure"

local function rows()
    return tonumber(daemon.sql("SELECT count(*) FROM queen.ephemeral_queues"))
end

describe("configures in flight", function()
    local d
    before_each(function()
        daemon.forget_declarations()
        d = daemon.start({ db = true, env = {
            QUEEN_EPHEMERAL_TENANT_MAX_QUEUES = "3",
        } })
    end)
    after_each(function()
        d:stop()
        daemon.forget_declarations()
    end)

    -- Sends each configure on its own connection before reading any answer.
    local function configure_together(names)
        local conns = {}
        for i, name in ipairs(names) do
            conns[i] = d:connect()
            conns[i]:send(daemon.format("POST", CONFIGURE,
                                        '{"queue":"' .. name .. '"}'))
        end
        local answers = {}
        for i, c in ipairs(conns) do
            answers[i] = assert(c:receive())
            c:close()
        end
        return answers
    end

    it("pass the queue allowance no further than it has room", function()
        local names = {}
        for i = 1, 20 do names[i] = "race" .. i end
        local created = 0
        for _, res in ipairs(configure_together(names)) do
            if res.status == 201 then
                created = created + 1
            else
                assert.refused_with("ephemeral_quota_exceeded", res)
            end
        end
        assert.equals(3, created)
        assert.equals(3, rows())
        assert.equals(3, d:request("GET", "/api/v1/ephemeral/queues")
                             .json.count)
        -- The allowance is spent: a pop or push naming a new queue is
        -- refused too, and a configure of a queue that exists is not.
        assert.refused_with("ephemeral_quota_exceeded", d:pop("queue=late"))
        assert.refused_with("ephemeral_quota_exceeded", d:push("late", { "1" }))
        local existing = d:request("GET", "/api/v1/ephemeral/queues")
                          .json.queues[1].queue
        assert.equals(201, d:request("POST", CONFIGURE,
            '{"queue":"' .. existing .. '","options":{"maxLength":5}}')
            .status)
        assert.equals(3, rows())
    end)

    it("give their reservation back when the write fails", function()
        daemon.sql("ALTER TABLE queen.ephemeral_queues RENAME TO moved")
        finally(function()
            daemon.sql("ALTER TABLE IF EXISTS queen.moved RENAME TO "
                       .. "ephemeral_queues")
        end)
        local names = {}
        for i = 1, 5 do names[i] = "failing" .. i end
        -- At most three are in flight at once, each failing; the rest are
        -- refused outright, unless an earlier write had already failed
        -- and given its place back (a slow broker reads the five
        -- requests over a longer time than the database takes to fail).
        local failed, refused = 0, 0
        for _, res in ipairs(configure_together(names)) do
            if res.status == 500 then
                failed = failed + 1
            else
                assert.refused_with("ephemeral_quota_exceeded", res)
                refused = refused + 1
            end
        end
        assert.is_true(failed >= 3, failed .. " failed")
        assert.equals(5, failed + refused)
        daemon.sql("ALTER TABLE queen.moved RENAME TO ephemeral_queues")
        local bytes = d:request("GET", "/api/v1/ephemeral/queues")
                       .json.cellBytes
        for i = 1, 3 do
            assert.equals(201, d:request("POST", CONFIGURE,
                '{"queue":"after' .. i .. '"}').status)
        end
        assert.refused_with("ephemeral_quota_exceeded",
            d:request("POST", CONFIGURE, '{"queue":"after4"}'))
        assert.equals(3, rows())
        -- Nothing is left of them but the tenant's record (about 300).
        assert.is_true(bytes < 600, tostring(bytes))
    end)
end)
