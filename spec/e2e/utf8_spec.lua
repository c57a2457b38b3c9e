-- Strict UTF-8 on every route and in every place a client's string lands:
-- a name that is not UTF-8 would make the tenant's listing unparseable for
-- every client, and a payload string that is not would be handed, byte for
-- byte, to every consumer.
local daemon = require("e2e.daemon")

local PUSH = "/api/v1/ephemeral/push"
local ACK = "/api/v1/ephemeral/ack"

-- One of each class RFC 3629 refuses: a lone continuation byte, an overlong
-- '/', a surrogate (U+D800), a code point above U+10FFFF, a truncated
-- three-byte character, and bytes that begin nothing.
local BAD = { "\128", "\192\175", "\237\160\128", "\244\144\128\128",
              "\230\151", "\255" }
local PERCENT = { "%80", "%C0%AF", "%ED%A0%80", "%F4%90%80%80", "%E6%97",
                  "%FF" }

local function names(d)
    local list = d:request("GET", "/api/v1/ephemeral/queues").json
    local out = {}
    for _, q in ipairs(list.queues) do out[#out + 1] = q.queue end
    table.sort(out)
    return out
end

describe("strict UTF-8", function()
    local d
    lazy_setup(function() d = daemon.start() end)
    lazy_teardown(function() d:stop() end)

    it("refuses push names and payload strings that are not UTF-8",
       function()
        for _, bad in ipairs(BAD) do
            for _, body in ipairs({
                '{"queue":"q' .. bad .. '","messages":[{"payload":1}]}',
                '{"queue":"q","partition":"p' .. bad
                    .. '","messages":[{"payload":1}]}',
                '{"queue":"q","messages":[{"payload":"x' .. bad .. '"}]}',
                '{"queue":"q","messages":[{"payload":{"k' .. bad
                    .. '":1}}]}',
                '{"queue":"q","messages":[{"payload":[1,{"a":["'
                    .. ("x"):rep(30) .. bad .. '"]}]}]}',
            }) do
                local res = d:request("POST", PUSH, body)
                assert.refused_with("ephemeral_bad_request", res)
                assert.equals("the body is not UTF-8: every string must be "
                              .. "strict UTF-8 (RFC 3629)", res.json.error)
            end
        end
        assert.same({}, names(d))
    end)

    -- A lone surrogate escape would decode to the three bytes refused
    -- above: it is refused as malformed JSON, in a name and in a payload.
    it("refuses lone surrogate escapes", function()
        for _, body in ipairs({
            '{"queue":"q\\ud800","messages":[{"payload":1}]}',
            '{"queue":"q","messages":[{"payload":"\\udc00"}]}',
            '{"queue":"q","messages":[{"payload":"\\ud83d\\u0041"}]}',
        }) do
            assert.refused_with("ephemeral_bad_request",
                                d:request("POST", PUSH, body))
        end
        assert.same({}, names(d))
    end)

    it("keeps UTF-8 payloads and names byte for byte", function()
        local text = '"é日😀\\u00e9 \\ud83d\\ude00' .. ("ü"):rep(40) .. '"'
        assert.equals(201, d:request("POST", PUSH, '{"queue":"ünï","partition"'
            .. ':"日本","messages":[{"payload":' .. text .. '}]}').status)
        local res = d:pop("queue=%C3%BCn%C3%AF&partition=%E6%97%A5%E6%9C%AC"
                          .. "&autoAck=true")
        assert.equals(200, res.status)
        local raw = res.body:match('"payload":(.*)}%]}$')
        assert.equals(text, raw)
        assert.same({ "ünï" }, names(d))
        d:request("DELETE", "/api/v1/ephemeral/queue/%C3%BCn%C3%AF")
    end)

    it("refuses ack names and strings that are not UTF-8", function()
        for _, bad in ipairs(BAD) do
            for _, body in ipairs({
                '{"queue":"q' .. bad .. '","acks":[]}',
                '{"queue":"q","group":"g' .. bad .. '","acks":[]}',
                '{"queue":"q","acks":[{"id":"e:1:p' .. bad .. ':1"}]}',
                '{"queue":"q","acks":[{"id":"e:1:p:1","status":"failed",'
                    .. '"error":"' .. bad .. '"}]}',
            }) do
                local res = d:request("POST", ACK, body)
                assert.refused_with("ephemeral_bad_request", res)
                assert.equals("the body is not UTF-8: every string must be "
                              .. "strict UTF-8 (RFC 3629)", res.json.error)
            end
        end
    end)

    it("refuses percent-decoded pop names that are not UTF-8", function()
        for _, bad in ipairs(PERCENT) do
            for _, query in ipairs({ "queue=q" .. bad,
                                     "queue=q&partition=p" .. bad,
                                     "queue=q&group=g" .. bad }) do
                local res = d:pop(query)
                assert.refused_with("ephemeral_bad_request", res)
                assert.truthy(res.json.error:find("is not UTF-8", 1, true))
            end
        end
        assert.same({}, names(d))
    end)

    it("refuses delete and depth path segments that are not UTF-8",
       function()
        for _, bad in ipairs(PERCENT) do
            local res = d:request("DELETE", "/api/v1/ephemeral/queue/q" .. bad)
            assert.refused_with("ephemeral_bad_request", res)
            assert.equals("queue is not UTF-8 (RFC 3629)", res.json.error)
            res = d:request("GET", "/api/v1/ephemeral/queues/q" .. bad
                                   .. "/depth")
            assert.refused_with("ephemeral_bad_request", res)
            res = d:request("GET", "/api/v1/ephemeral/queues/q/depth?group=g"
                                   .. bad)
            assert.refused_with("ephemeral_bad_request", res)
            assert.equals("group is not UTF-8 (RFC 3629)", res.json.error)
        end
    end)

    it("refuses configure, reset and kill switch bodies that are not UTF-8",
       function()
        for _, bad in ipairs(BAD) do
            for _, req in ipairs({
                { "/api/v1/ephemeral/configure", '{"queue":"q' .. bad .. '"}' },
                { "/api/v1/ephemeral/configure",
                  '{"queue":"q","options":{"policy":"reject' .. bad .. '"}}' },
                { "/api/v1/ephemeral/reset", '{"queue":"q' .. bad .. '"}' },
                { "/api/v1/system/ephemeral",
                  '{"enabled":true,"reason":"' .. bad .. '"}' },
            }) do
                local res = d:request("POST", req[1], req[2])
                assert.refused_with("ephemeral_bad_request", res)
                assert.equals("the body is not UTF-8: every string must be "
                              .. "strict UTF-8 (RFC 3629)", res.json.error)
            end
        end
        assert.is_true(d:request("GET", "/api/v1/system/ephemeral").json
                       .enabled)
    end)

    it("answers in UTF-8 when a message quotes bytes that are not",
       function()
        -- A system route quotes a parameter it does not know (the
        -- family's routes ignore one).
        local res = d:request("GET", "/api/v1/system/queues?%FF=1")
        assert.refused_with("ephemeral_bad_request", res)
        assert.is_nil(res.body:find("[\128-\255]"))
        res = d:request("GET", "/api/v1/nowhere/%FF\255")
        assert.equals(404, res.status)
        assert.is_nil(res.body:find("[\128-\255]"))
        -- A key is quoted whole or cut before a character, never inside
        -- one.
        res = d:request("POST", PUSH, '{"a' .. ("é"):rep(40) .. '":1}')
        assert.refused_with("ephemeral_bad_request", res)
        assert.truthy(res.json.error:find('"a' .. ("é"):rep(31) .. '"', 1,
                                          true))
    end)
end)
