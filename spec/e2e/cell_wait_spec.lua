-- A waiting pop naming no partition is answered at its timeout in a cell,
-- as on one broker, even while a member does not answer at all (stopped,
-- its loop stuck): before, the sweep waited for that member through the
-- relay's deadline, and a pop of 1 s answered after 5 s.
local daemon = require("e2e.daemon")

local ENV = { QUEEN_EPHEMERAL_MEMBER_TTL_MS = "3000",
              QUEEN_EPHEMERAL_RELAY_TIMEOUT_MS = "5000",
              QUEEN_EPHEMERAL_CELL_TOKEN = "cell-wait-spec-token-0123456789abc" }

describe("a waiting pop over the whole cell", function()
    it("answers at its timeout while a member does not answer", function()
        local ds = daemon.start_cell(3, ENV)
        finally(function()
            os.execute("kill -CONT " .. ds[3].pid)
            daemon.stop_all(ds)
        end)
        daemon.await_cell(ds, 10)
        -- Every member knows the queue (the group's first pop announces
        -- it), so every member is asked.
        assert.equals(200, ds[1]:pop("queue=frozen&group=g").status)
        os.execute("kill -STOP " .. ds[3].pid)
        for _ = 1, 2 do
            local t0 = daemon.now()
            local res = ds[1]:pop("queue=frozen&group=g&wait=true&timeout=1000")
            local took = daemon.now() - t0
            assert.equals(200, res.status, res.body)
            assert.equals(0, #res.json.messages)
            assert.is_true(took >= 1 and took < 2, "answered after " .. took)
        end
    end)
end)
