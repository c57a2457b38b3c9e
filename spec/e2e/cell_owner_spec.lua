-- owner_moved between members names the owner by the answering member's
-- view (X-Queen-Owner), and the edge sends its one retry there when its
-- own view still names the member it asked: a member that joined a moment
-- ago is in the owner's view before the edge has probed it, and the
-- client heard owner_moved for each of its partitions meanwhile (tens per
-- restart in a rolling restart).
local daemon = require("e2e.daemon")
local mark = require("e2e.mark")
local socket = require("socket")

local TOKEN = "cell-owner-spec-token-0123456789abcdef"
local TENANT = "00000000-0000-0000-0000-000000000001"
local ENV = { QUEEN_EPHEMERAL_CELL_TOKEN = TOKEN,
              QUEEN_EPHEMERAL_MEMBER_TTL_MS = "400" }

local function live_of(d)
    return d:cell().live
end

describe("owner_moved in a cell", function()
    it("names, for the edge, the owner by the answering member's view",
       function()
        local ds = daemon.start_cell(2, ENV)
        finally(function() daemon.stop_all(ds) end)
        daemon.await_cell(ds, 10)
        local a, b = ds[1], ds[2]
        local ida = a:cell().self.id
        -- A partition a owns, pushed to b marked as a member's relay.
        for i = 1, 40 do
            local body = '{"queue":"named","partition":"p-' .. i
                         .. '","messages":[{"payload":1}]}'
            local path = "/api/v1/ephemeral/push"
            local res = b:request("POST", path, body,
                                  mark.headers(TOKEN, b, TENANT))
            if res.status == 503 then
                assert.equals("owner_moved", res.json.code, res.body)
                assert.equals("1", res.headers["retry-after"])
                assert.equals(ida, res.headers["x-queen-owner"])
                return
            end
            assert.equals(201, res.status, res.body)
        end
        error("no partition of 40 was a's")
    end)

    it("is retried by the edge at the member it names, which this edge "
       .. "has not probed yet", function()
        local port = daemon.free_port()
        local id, epoch = "f0000000000000d1", 4022250976
        local ready, hint, seen = os.tmpname(), os.tmpname(), os.tmpname()
        local p = io.popen(("luajit %s/spec/e2e/fake_member.lua hinting %d %s %d "
                            .. "%s %s %s >/dev/null 2>&1 & echo $!"):format(
            require("helper").root, port, id, epoch, ready, hint, seen))
        local pid = p:read("*l")
        p:close()
        daemon.wait_until("the fake to listen", function()
            local c = socket.connect("127.0.0.1", port)
            if c then c:close() end
            return c
        end)
        local ds = {}
        finally(function()
            daemon.stop_all(ds)
            os.execute("kill " .. pid)
            os.remove(ready)
            os.remove(hint)
            os.remove(seen)
            daemon.sql("DELETE FROM queen.ephemeral_members WHERE id = '"
                       .. id .. "'")
        end)
        -- a counts the fake ready; b, started once it stopped answering
        -- as ready, does not.
        ds[1] = daemon.start({ db = true, env = ENV })
        local a = ds[1]
        daemon.member_row(TOKEN, id, "http://127.0.0.1:" .. port, epoch,
                          600000)
        daemon.wait_until("a to take the fake", function()
            return live_of(a) == 2
        end)
        os.remove(ready)
        ds[2] = daemon.start({ db = true, env = ENV })
        local b = ds[2]
        daemon.wait_until("a to take b", function() return live_of(a) == 3 end)
        assert.equals(2, live_of(b))
        local f = io.open(hint, "w")
        f:write(b:cell().self.id)
        f:close()
        -- Partitions the fake owns by a's view: some are b's by b's view,
        -- and pushed through a they land at b; none answers owner_moved
        -- but one b answers for a partition that is a's by b's view.
        local landed = 0
        for i = 1, 40 do
            local part = "p-" .. i
            local res = a:push("hinted", { tostring(i) }, part)
            local asked = (io.open(seen):read("*a")):find('"' .. part .. '"',
                                                          1, true)
            -- The member id is the edge's alone; a client's hint names
            -- the member that served the push, none an owner_moved.
            assert.is_nil(res.headers["x-queen-owner"])
            if asked and res.status == 201 then
                landed = landed + 1
                assert.truthy(b:held("hinted")[part], part)
                assert.equals("http://127.0.0.1:" .. b.port,
                              res.headers["x-queen-owner-address"])
            elseif res.status ~= 201 then
                assert.truthy(asked, res.body)
                assert.equals("owner_moved", res.json.code)
                assert.is_nil(res.headers["x-queen-owner-address"])
            end
        end
        assert.is_true(landed > 0, "no push was retried at the owner named")
    end)
end)
