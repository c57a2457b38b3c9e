local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers.ack", function()
    local commits, ack, scan_result

    before_each(function()
        commits = {}
        helper.core_double({
            ephd_ffi_ack_scan = function(req) return scan_result(req.op.scan) end,
            ephd_ffi_ack_commit = function(_, t, tl)
                commits[#commits + 1] = ffi.string(t, tl)
                return 0
            end,
        })
        ack = require("ephd.handlers.ack")
    end)

    local anchor
    local function scanned(queue, group)
        anchor = { queue, group }
        scan_result = function(scan)
            scan.queue.ptr, scan.queue.len = queue, #queue
            scan.has_group = group and 1 or 0
            if group then scan.group.ptr, scan.group.len = group, #group end
            return 0
        end
    end

    it("commits a well-formed ack for the tenant; C writes the results",
       function()
        scanned("q", "g")
        local ctx = helper.ctx({}, "tenant-b")
        assert.is_nil(ack.parse(ctx))
        assert.equals(0, ack.commit(ctx))
        assert.same({ "tenant-b" }, commits)
        assert.truthy(anchor)
    end)

    it("refuses bad names and scanner failures", function()
        scanned("q", ("g"):rep(513))
        assert.is_string(ack.parse(helper.ctx({})))
        scanned("q\2", nil)
        assert.is_string(ack.parse(helper.ctx({})))
        scan_result = function(scan)
            ffi.copy(scan.message, "status is completed, failed or retry")
            return -1
        end
        assert.equals("status is completed, failed or retry",
                      ack.parse(helper.ctx({})))
        assert.same({}, commits)
    end)
end)
