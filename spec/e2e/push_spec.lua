-- push: all or nothing, exact payload bytes, shape refusals, bounds.
local daemon = require("e2e.daemon")
local cjson = require("cjson")

local PUSH = "/api/v1/ephemeral/push"

describe("push", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "20000",
            QUEEN_EPHEMERAL_QUEUE_MAX_BYTES = "100000000",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    it("answers 201 with the number pushed", function()
        local res = d:push("p1", { "1", '"two"', "{}" })
        assert.equals(201, res.status)
        assert.equals('{"pushed":3}', res.body)
        assert.equals("application/json", res.headers["content-type"])
        assert.equals(3, d:depth("p1").json.pending)
    end)

    it("answers 201 pushed 0 to an empty array and creates nothing",
       function()
        local res = d:push("empty", {})
        assert.equals(201, res.status)
        assert.equals('{"pushed":0}', res.body)
        assert.equals(404, d:depth("empty").status)
    end)

    it("returns payload bytes exactly as sent", function()
        local payload = '{"b":1,"a":[1.0,12345678901234567890,"\\u00e9"]}'
        local spaced = '[ 1 ,\t2 ,"\\/"]'
        d:push("exact", { payload, spaced })
        local res = d:pop("queue=exact&batch=2")
        assert.truthy(res.body:find('"payload":' .. payload .. '}', 1, true))
        assert.truthy(res.body:find('"payload":' .. spaced .. '}', 1, true))
    end)

    it("puts messages in the named partition, Default otherwise", function()
        d:push("parts", { "1" }, "room-7")
        d:push("parts", { "2" })
        local depth = d:depth("parts").json
        local names = {}
        for _, p in ipairs(depth.partitions) do names[p.partition] = p.pending end
        assert.same({ ["room-7"] = 1, Default = 1 }, names)
    end)

    local function refused(body, queue)
        local res = d:request("POST", PUSH, body)
        assert.refused_with("ephemeral_bad_request", res)
        if queue then assert.equals(404, d:depth(queue).status) end
        return res
    end

    it("refuses malformed JSON and changes nothing", function()
        refused('{"queue":"bad1","messages":[{"payload":1}]', "bad1")
        refused('{"queue":"bad1","messages":[{"payload":}]}', "bad1")
        refused('not json', nil)
        refused('', nil)
    end)

    it("refuses wrong types and extra fields", function()
        refused('{"queue":7,"messages":[]}')
        refused('{"queue":"bad2","messages":{}}', "bad2")
        refused('{"queue":"bad2","messages":[1]}', "bad2")
        refused('{"queue":"bad2","messages":[{}]}', "bad2")
        refused('{"queue":"bad2","messages":[{"payload":1,"x":2}]}', "bad2")
        refused('{"queue":"bad2","messages":[{"payload":1,"payload":2}]}',
                "bad2")
        refused('{"queue":"bad2","partition":3,"messages":[]}', "bad2")
        refused('{"queue":"bad2","tenant":"x","messages":[]}', "bad2")
        refused('{"messages":[]}')
        refused('{"queue":"bad2"}', "bad2")
        refused('[]')
    end)

    it("refuses names over 512 bytes or with control characters", function()
        local long = ("n"):rep(513)
        refused(cjson.encode({ queue = long, messages = {} }))
        refused('{"queue":"a\\u0001b","messages":[{"payload":1}]}')
        refused('{"queue":"a\\u0000","messages":[{"payload":1}]}')
        refused('{"queue":"ok","partition":"p\\n","messages":[{"payload":1}]}',
                "ok")
        refused('{"queue":"","messages":[{"payload":1}]}')
        -- DEL and C1 (U+0080-U+009F), in either name.
        refused('{"queue":"a\\u007f","messages":[{"payload":1}]}')
        refused('{"queue":"a\127","messages":[{"payload":1}]}')
        refused('{"queue":"a\\u0085","messages":[{"payload":1}]}')
        refused('{"queue":"a\194\133","messages":[{"payload":1}]}')
        refused('{"queue":"ok","partition":"\\u009f","messages":[{"payload":1}]}',
                "ok")
        refused('{"queue":"ok","partition":"","messages":[{"payload":1}]}',
                "ok")
        -- Said as it is: a partition may be left out, not given empty.
        local res = d:request("POST", "/api/v1/ephemeral/push",
            '{"queue":"ok","partition":"","messages":[{"payload":1}]}')
        assert.equals("partition must not be empty (leave it out for Default)",
                      res.json.error)
        -- Other characters past ASCII are names like any.
        assert.equals(201, d:push("caf\u{e9}-\u{a0}", { "1" }).status)
        local exact = ("m"):rep(512)
        assert.equals(201, d:push(exact, { "1" }).status)
    end)

    it("refuses 10,001 messages whole and accepts 10,000", function()
        local msgs = {}
        for i = 1, 10001 do msgs[i] = "1" end
        local res = d:push("many", msgs)
        assert.refused_with("ephemeral_bad_request", res)
        assert.equals(404, d:depth("many").status)
        msgs[10001] = nil
        res = d:push("many", msgs)
        assert.equals(201, res.status)
        assert.equals(10000, res.json.pushed)
    end)
end)

describe("push at a bound", function()
    local d
    lazy_setup(function()
        d = daemon.start({ env = {
            QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH = "5",
            -- The cell counts names and per-message overhead too: "b"
            -- below takes about 840 bytes, "cell" 710, the tenant 270.
            QUEEN_EPHEMERAL_MAX_BYTES = "2048",
        } })
    end)
    lazy_teardown(function() d:stop() end)

    it("is all or nothing under the reject policy", function()
        assert.equals(201, d:push("b", { "1", "2", "3" }).status)
        local res = d:push("b", { "4", "5", "6" })
        assert.refused_with("queue_full", res)
        assert.equals(3, d:depth("b").json.pending)
        assert.equals(201, d:push("b", { "4", "5" }).status)
        assert.equals(5, d:depth("b").json.pending)
    end)

    it("answers 503 at the broker's byte ceiling", function()
        local blob = '"' .. ("x"):rep(30) .. '"'
        assert.equals(201, d:push("cell", { blob }).status)
        local res = d:push("cell2", { blob })
        assert.refused_with("ephemeral_unavailable", res)
        -- A refused push does not even leave an empty queue behind.
        assert.equals(404, d:depth("cell2").status)
    end)

    it("names the queue bound when the cell is full too", function()
        -- 6 messages break maxLength 5 and the full cell at once.
        local res = d:push("both", { '"aaaaaaaaaa"', "1", "1", "1", "1", "1" })
        assert.refused_with("queue_full", res)
    end)
end)
