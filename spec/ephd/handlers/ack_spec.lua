local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers.ack", function()
    local answers, commits, ack, scan_result

    before_each(function()
        local respond
        respond, answers = helper.responder()
        commits = 0
        helper.core_double({
            ephd_respond = respond,
            ephd_ack_scan = function(_, scan) return scan_result(scan) end,
            ephd_ack_commit = function() commits = commits + 1 return 0 end,
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

    it("commits a well-formed ack; C writes the results", function()
        scanned("q", "g")
        ack(helper.request({}), "t")
        assert.equals(1, commits)
        assert.equals(0, #answers)
        assert.truthy(anchor)
    end)

    it("refuses bad names and scanner failures with 400", function()
        scanned("q", ("g"):rep(513))
        ack(helper.request({}), "t")
        scanned("q\2", nil)
        ack(helper.request({}), "t")
        scan_result = function(scan)
            ffi.copy(scan.message, "status is completed, failed or retry")
            return -1
        end
        ack(helper.request({}), "t")
        assert.equals(0, commits)
        assert.equals(3, #answers)
        for _, a in ipairs(answers) do assert.equals(400, a.status) end
    end)
end)
