-- A rolling restart as a client loop sees it (docs/cell.md, "What a
-- client sees"): brokers stopped with SIGTERM and started again one after
-- another, without a pause, while a client pushes, pops and acks through
-- the others. No message answered 201 is lost, no request hears
-- ephemeral_forward_failed, and owner_moved is rare (before: thousands of
-- the first and of the second per run, and a message lost in one run of
-- three).
local daemon = require("e2e.daemon")
local cjson = require("cjson")

local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "1000",
              QUEEN_EPHEMERAL_CELL_TOKEN = "cell-restart-spec-token-0123456789" }
local ROUNDS = 4

describe("a rolling restart", function()
    it("loses nothing and shows the client no forward failure", function()
        local ds = daemon.start_cell(3, ENV)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local n, pushed, got, refused = 0, {}, {}, {}
        local function note(what, res)
            if res.status == 503 then
                local k = what .. " " .. tostring(res.json and res.json.code)
                refused[k] = (refused[k] or 0) + 1
            end
        end
        -- One push, one pop and its ack through via; a connection refused
        -- (via stopping) is the client's to take elsewhere.
        local function one(via)
            n = n + 1
            local ok, res = pcall(via.push, via, "roll", { tostring(n) },
                                  "p-" .. n % 16)
            if not ok then return end
            note("push", res)
            if res.status == 201 then pushed[n] = via.port end
            ok, res = pcall(via.pop, via, "queue=roll&group=g&batch=4")
            if not ok then return end
            note("pop", res)
            if res.status ~= 200 then return end
            local acks = {}
            for i, m in ipairs(res.json.messages) do
                got[m.payload] = true
                acks[i] = { m.id }
            end
            if #acks > 0 then
                ok, res = pcall(via.ack, via, "roll", "g", acks)
                if ok then note("ack", res) end
            end
        end
        for _ = 1, ROUNDS do
            for i = 1, 3 do
                local victim, port = ds[i], ds[i].port
                local x, y = ds[i % 3 + 1], ds[(i + 1) % 3 + 1]
                os.execute("kill -TERM " .. victim.pid)
                while victim:alive() do
                    one(x)
                    one(y)
                end
                victim:stop() -- gone already: checks its log
                ds[i] = daemon.start({ db = true, env = ENV, port = port })
                for _ = 1, 30 do
                    one(x)
                    one(y)
                    one(ds[i])
                end
            end
        end
        -- Drained through one broker (a pop naming no partition sees the
        -- whole cell; what is popped is acked and does not come back).
        local function lost()
            local miss = {}
            for k in pairs(pushed) do
                if not got[k] then miss[#miss + 1] = k end
            end
            return miss
        end
        daemon.wait_until(function()
            return ("%d lost (%s); refused %s"):format(#lost(),
                table.concat(lost(), " ", 1, math.min(#lost(), 20)),
                cjson.encode(refused))
        end, function()
            one(ds[1])
            return #lost() == 0
        end, 20, 0)
        for _, verb in ipairs({ "push", "pop", "ack" }) do
            assert.is_nil(refused[verb .. " ephemeral_forward_failed"],
                          cjson.encode(refused))
        end
        local moved = 0
        for k, v in pairs(refused) do
            if k:find("owner_moved") then moved = moved + v end
        end
        -- A few per restart at most, around the newcomer's first probes.
        assert.is_true(moved <= 3 * 3 * ROUNDS, cjson.encode(refused))
    end)
end)
