local helper = require("helper")
local policy = require("ephd.policy")
local replay = require("ephd.replay")
local testing = require("ephd.testing")
local verdict = require("ephd.verdict")

local A = "11111111-1111-1111-1111-111111111111"
local B = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
local STRICT = helper.root .. "/spec/e2e/policies/replay-strict"

-- A policy directory from memory, loaded as the broker loads one.
local function load(files)
    local default_dir = testing.default_dir()
    return assert(policy.load("/mem", files, default_dir,
                              testing.read(default_dir), {}))
end

local function strict()
    return load(testing.read(STRICT))
end

-- A request line as the broker writes it, at a millisecond of the day.
local function line(ms, fields)
    local parts = {}
    for k, v in pairs(fields) do parts[#parts + 1] = k .. "=" .. v end
    table.sort(parts)
    return ("ts=2026-12-03T10:00:%02d.%03dZ level=info event=request %s")
        :format(math.floor(ms / 1000), ms % 1000, table.concat(parts, " "))
end

local function push(ms, tenant, code, extra)
    local f = { route = "push", method = "POST",
                path = "/api/v1/ephemeral/push", tenant = tenant,
                identity = tenant, access = "read-write", queue = "q",
                partition = "Default", messages = 1, bytes = 1,
                code = code or "pass" }
    for k, v in pairs(extra or {}) do f[k] = v end
    return line(ms, f)
end

describe("ephd.replay", function()
    describe("reading the log", function()
        it("reads logfmt fields, quoted ones unescaped", function()
            assert.same({ ts = "x", a = "b c", q = 'say "hi"\n', e = "" },
                        replay.fields('ts=x a="b c" q="say \\"hi\\"\\n" e=""'))
        end)

        it("skips a prefix before ts, refuses a line cut short", function()
            assert.same({ ts = "1", event = "request" }, replay.fields(
                "Dec 03 host ephd[42]: ts=1 event=request"))
            assert.is_nil(replay.fields('ts=1 error="cut'))
            assert.is_nil(replay.fields("no stamp here"))
        end)

        it("reads a stamp as milliseconds since the epoch, in UTC", function()
            assert.equals(1796319369541, replay.ms("2026-12-03T17:36:09.541Z"))
            assert.equals(951782400000, replay.ms("2000-02-29T00:00:00.000Z"))
            assert.is_nil(replay.ms("2026-12-03 17:36:09"))
        end)

        it("parses request lines only, their numbers as numbers", function()
            local r = replay.parse(push(1500, A, "rate_limited",
                                        { status = 429, rung = "rate" }))
            assert.equals(replay.ms("2026-12-03T10:00:01.500Z"), r.at)
            assert.same({ "push", "rate_limited", 429 },
                        { r.route, r.code, r.status })
            assert.equals(1, r.fields.messages)
            assert.equals("read-write", r.fields.access)
            assert.is_nil(r.fields.level)
            assert.is_nil(r.fields.ts)
            assert.is_nil(replay.parse(
                "ts=2026-12-03T10:00:00.000Z level=info event=refused "
                .. "code=forbidden route=push status=403"))
            assert.is_true(replay.parse(push(0, A, "pass",
                                             { forwarded = "true" }))
                           .fields.forwarded)
        end)

        it("leaves out a line whose counts the broker could not have written",
           function()
            for _, bad in ipairs({ { messages = -100000 }, { bytes = "1e9" },
                                   { messages = "0x10" }, { status = "nan" },
                                   { bytes = "99999999999999999999" } }) do
                assert.is_nil(replay.parse(push(0, A, "pass", bad)))
            end
            assert.equals(0, replay.parse(push(0, A, "pass",
                                               { messages = 0 })).fields.messages)
        end)

        it("leaves out a request line naming no route, and replays on",
           function()
            assert.is_nil(replay.parse(push(0, A, "pass",
                                            { route = "nonexistent" })))
            local r = replay.new(strict())
            r:line(push(0, A, "pass", { route = "nonexistent" }))
            r:line(push(0, A, "pass"))
            assert.equals(2, r.read)
            assert.equals(1, r.requests)
        end)
    end)

    describe("replaying", function()
        it("finds what a stricter rate refuses, refilled by the logged clock",
           function()
            local r = replay.new(strict())
            for i = 0, 3 do r:line(push(i * 10, B)) end
            r:line(push(40, A))
            -- A second later: one token back.
            r:line(push(1100, B))
            r:line(push(1110, B))
            assert.equals(7, r.requests)
            assert.equals(3, r.differ)
            local pairs_, tenants = r:summary()
            assert.same({ { live = "pass", replayed = "rate_limited",
                            count = 3 } }, pairs_)
            assert.same({ { tenant = B, count = 3 } }, tenants)
            assert.same({ 20, 30, 1110 }, {
                r.samples[1].at % 60000, r.samples[2].at % 60000,
                r.samples[3].at % 60000 })
            assert.equals("rate", r.samples[1].rung)
        end)

        it("serves what the live policy refused and the candidate allows",
           function()
            local r = replay.new(strict())
            r:line(push(0, A, "rate_limited", { status = 429 }))
            r:line(push(10, A, "feature_gated", { status = 403 }))
            assert.equals(2, r.differ)
            assert.same({ "pass", "pass" }, { r.samples[1].replayed,
                                              r.samples[2].replayed })
        end)

        it("asks admit about the logged names, group too, and serves "
           .. "what a live admit refused and the candidate allows",
           function()
            local r = replay.new(load(testing.read(helper.root
                .. "/spec/e2e/policies/every-rung")))
            r:line(push(0, A, "pass", { queue = "tmp-1" }))
            r:line(line(10, { route = "pop", method = "GET",
                              path = "/api/v1/ephemeral/pop", tenant = A,
                              identity = A, access = "read-write",
                              queue = "q", group = "closed", code = "pass" }))
            assert.equals(2, r.differ)
            assert.same({ "ephemeral_quota_exceeded", "admit" },
                        { r.samples[1].replayed, r.samples[1].rung })
            assert.same({ "forbidden", "admit" },
                        { r.samples[2].replayed, r.samples[2].rung })
            r = replay.new(strict())
            r:line(push(20, A, "queue_full", { rung = "admit",
                                               status = 429 }))
            assert.equals("pass", r.samples[1].replayed)
        end)

        it("keeps the engine's answers and the shape's", function()
            local r = replay.new(strict())
            r:line(push(0, B, "queue_full", { rung = "commit" }))
            r:line(push(10, B, "ephemeral_bad_request", { rung = "shape" }))
            -- Neither took a token: two more pushes pass.
            r:line(push(20, B))
            r:line(push(30, B))
            assert.equals(0, r.differ)
        end)

        it("takes the boot block's settings and starts afresh at a boot",
           function()
            local r = replay.new(strict())
            r:line("ts=2026-12-03T10:00:00.000Z level=info event=setting "
                   .. "name=QUEEN_TENANCY_HEADER value=true")
            r:line("ts=2026-12-03T10:00:00.000Z level=info event=setting "
                   .. "name=QUEEN_EPHEMERAL_REQUIRE_GRANT value=false")
            r:line("ts=2026-12-03T10:00:00.000Z level=info event=listening "
                   .. "addr=127.0.0.1:1 epoch=1 pid=1")
            -- With tenancy headers a tenant read is read-write: not admin.
            r:line(line(10, { route = "system_status", method = "GET",
                              path = "/api/v1/system/ephemeral", tenant = A,
                              identity = A, access = "admin", code = "pass" }))
            assert.equals("forbidden", r.samples[1].replayed)
            for i = 1, 3 do r:line(push(20 + i, B)) end
            r:line("ts=2026-12-03T10:00:00.100Z level=info event=listening "
                   .. "addr=127.0.0.1:1 epoch=2 pid=2")
            r:line(push(110, B))
            assert.equals(2, r.boots)
            assert.equals(2, r.differ)
        end)

        it("gives an authenticate hook the logged identity, or keeps the "
           .. "live answer", function()
            local p = load({ init = [[
                return { name = "auth", version = 1, hooks = {
                    authenticate = function() error("never called") end,
                    limits = function() return { rate = 1, burst = 1 } end,
                } }]] })
            local r = replay.new(p)
            r:line(push(0, B))
            r:line(push(10, B))
            r:line(line(20, { route = "push", method = "POST",
                              path = "/api/v1/ephemeral/push", tenant = B,
                              code = "unauthorized", rung = "authenticate" }))
            assert.equals(1, r.differ)
            assert.equals(1, r.kept)
        end)

        it("follows the kill switch as the log sets it, lifted at a boot",
           function()
            local function event(ms, rest)
                return ("ts=2026-12-03T10:00:00.%03dZ level=info event=%s")
                    :format(ms, rest)
            end
            local paused = { rung = "paused", status = 503 }
            local r = replay.new(strict())
            r:line(event(0, "surface_switched enabled=false reason=maint"))
            r:line(push(1, A, "ephemeral_disabled", paused))
            r:line(event(2, "listening addr=127.0.0.1:1 epoch=2 pid=2"))
            r:line(push(3, A))
            r:line(event(4, "surface_switched enabled=false"))
            r:line(event(5, "surface_switched enabled=true"))
            r:line(push(6, A))
            assert.equals(0, r.differ)
            -- The live policy's own paused hook, which the candidate lacks.
            r:line(push(7, A, "ephemeral_disabled", paused))
            assert.equals(1, r.differ)
            assert.equals("pass", r.samples[1].replayed)
        end)

        it("skips a request relayed in the cell at its owner", function()
            local r = replay.new(strict())
            for i = 1, 5 do r:line(push(i, B, "pass", { forwarded = "true" })) end
            assert.same({ 0, 5, 0 }, { r.requests, r.relayed, r.differ })
        end)

        it("raises a hook's failure, and one that runs past its budget",
           function()
            local r = replay.new(load({ init = [[
                return { name = "broken", version = 1, hooks = {
                    limits = function() error("no plan") end } }]] }))
            local ok, err = pcall(r.line, r, push(0, B))
            assert.is_false(ok)
            assert.equals("limits", (verdict.failure(err)))
            local budget = replay.BUDGET
            finally(function() replay.BUDGET = budget end)
            replay.BUDGET = 100000
            r = replay.new(load({ init = [[
                return { name = "loop", version = 1, hooks = {
                    cost = function() while true do end end } }]] }))
            ok, err = pcall(r.line, r, push(0, B))
            assert.is_false(ok)
            local hook, why = verdict.failure(err)
            assert.equals("cost", hook)
            assert.truthy(why:find("budget", 1, true))
        end)

        it("reports the differences a person reads", function()
            local r = replay.new(strict())
            for i = 0, 3 do r:line(push(i, B)) end
            local out = {}
            r:report({ write = function(_, ...)
                for _, s in ipairs({ ... }) do out[#out + 1] = s end
            end }, "header", 10)
            local text = table.concat(out)
            local flat = text:gsub("\n", " ")
            assert.truthy(text:find("^header\ncannot replay:\n"))
            assert.truthy(flat:find("4 requests replayed", 1, true))
            assert.truthy(flat:find("2 answered differently", 1, true))
            assert.truthy(text:find("pass  rate_limited  2", 1, true))
            assert.truthy(text:find(B .. "  2", 1, true))
        end)
    end)
end)
