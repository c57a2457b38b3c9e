local cjson = require("cjson")
local codes = require("ephd.codes")
local errors = require("ephd.errors")
local helper = require("helper")

local LAYERS = { family = "the family", access = "the access layer",
                 routing = "the HTTP layer" }

local function read(path)
    local f = assert(io.open(path, "rb"))
    local text = f:read("*a")
    f:close()
    return text
end

describe("ephd.codes", function()
    it("gives every code one error status of the list", function()
        local statuses, seen = {}, {}
        for _, s in ipairs(codes.STATUSES) do statuses[s.status] = true end
        for _, c in ipairs(codes.CODES) do
            assert.is_nil(seen[c.code], c.code)
            seen[c.code] = true
            assert.is_true(statuses[c.status], c.code)
            assert.is_true(c.status >= 400, c.code)
            assert.is_string(LAYERS[c.layer], c.code)
        end
    end)

    -- The table a client author reads is the list, row for row, and says
    -- nothing else: a note in a row ("not yet sent") outlives the code it
    -- described.
    it("is what docs/wire.md says", function()
        local doc = {}
        for code, status, from in read(helper.root .. "/docs/wire.md"):gmatch(
                "\n| `([%w_]+)` | (%d+) | ([^|]*[^| ]) |") do
            doc[#doc + 1] = { code = code, status = tonumber(status),
                              from = from }
        end
        assert.equals(#codes.CODES, #doc)
        for i, c in ipairs(codes.CODES) do
            assert.same({ code = c.code, status = c.status,
                          from = LAYERS[c.layer] }, doc[i])
        end
    end)

    -- C names codes and statuses through the header the build generates
    -- from the list (cmake/codes.cmake).
    it("is what C was built with, in order", function()
        local header = read(helper.build .. "/generated/ephd_codes.h")
        local c_codes, c_statuses = {}, {}
        for id, code, status in header:gmatch(
                'X%((EPHD_CODE_[%u_]+), "([%l_]+)", (%d+)%)') do
            assert.equals("EPHD_CODE_" .. code:upper(), id)
            c_codes[#c_codes + 1] = { code = code, status = tonumber(status) }
        end
        for status, reason in header:gmatch('X%((%d+), "([^"]+)"%)') do
            c_statuses[#c_statuses + 1] = { status = tonumber(status),
                                            reason = reason }
        end
        local want = {}
        for i, c in ipairs(codes.CODES) do
            want[i] = { code = c.code, status = c.status }
        end
        assert.same(want, c_codes)
        assert.same(codes.STATUSES, c_statuses)
    end)

    it("is every code ephd.client reads as the broker's", function()
        local client = require("ephd.client")
        -- An error of the client's own, to give each code in turn.
        local _, err = client.new({ url = "http://127.0.0.1:1" })
            :request("GET", "/")
        assert.equals("connection_failed", err.code)
        for _, c in ipairs(codes.CODES) do
            -- A broker's route_not_found reads as ephemeral_unsupported.
            assert.equals(c.code ~= "route_not_found",
                          client.CODES[c.code] == true, c.code)
            err.code = c.code
            assert.equals(c.status == 429 or c.status == 503,
                          client.retryable(err), c.code)
        end
    end)
end)

describe("ephd.errors", function()
    it("answers each code with its status", function()
        for _, c in ipairs(codes.CODES) do
            assert.equals(c.status, errors.status(c.code))
        end
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

    it("numbers the codes in the list's order, as C's ephd_code_t",
       function()
        local codes = require("ephd.codes")
        for i, c in ipairs(codes.CODES) do
            assert.equals(i - 1, errors.INDEX[c.code])
        end
    end)
end)
