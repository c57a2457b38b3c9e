local cjson = require("cjson")
local ffi = require("ffi")
local helper = require("helper")

describe("ephd.handlers.push", function()
    local answers, commits, scan_result, refusal, push

    -- A scan that reports a body with these names and this many messages.
    local keep = {}
    local function scanned(queue, partition, count)
        keep = { queue, partition }
        scan_result = function(scan)
            scan.queue.ptr, scan.queue.len = queue, #queue
            scan.partition.ptr, scan.partition.len = partition, #partition
            scan.count = count
            return 0
        end
    end

    before_each(function()
        local respond
        respond, answers = helper.responder()
        commits = {}
        refusal = 0
        local C
        C = helper.core_double({
            ephd_respond = respond,
            ephd_push_scan = function(_, scan) return scan_result(scan) end,
            ephd_push_commit = function(tenant, len, scan, out)
                commits[#commits + 1] = ffi.string(tenant, len)
                out[0] = refusal
                return refusal == 0 and 0 or C.EPHD_E_REFUSED
            end,
        })
        push = require("ephd.handlers.push")
    end)

    it("commits for the tenant and answers 201 with the count", function()
        scanned("q", "Default", 3)
        push(helper.request({}), "tenant-a")
        assert.same({ "tenant-a" }, commits)
        assert.same({ status = 201, body = '{"pushed":3}' }, answers[1])
    end)

    it("answers 201 pushed 0 for an empty array without committing",
       function()
        scanned("q", "Default", 0)
        push(helper.request({}), "t")
        assert.same({}, commits)
        assert.equals('{"pushed":0}', answers[1].body)
    end)

    it("answers the scanner's message as a 400", function()
        scan_result = function(scan)
            ffi.copy(scan.message, "messages must be an array")
            return -1
        end
        push(helper.request({}), "t")
        assert.equals(400, answers[1].status)
        assert.equals("messages must be an array",
                      cjson.decode(answers[1].body).error)
        assert.same({}, commits)
    end)

    it("refuses bad queue and partition names before committing", function()
        scanned(("q"):rep(513), "Default", 1)
        push(helper.request({}), "t")
        scanned("q", "p\1", 1)
        push(helper.request({}), "t")
        assert.equals(400, answers[1].status)
        assert.equals(400, answers[2].status)
        assert.same({}, commits)
        assert.truthy(keep)
    end)

    it("maps a budget refusal through the ladder", function()
        scanned("q", "Default", 1)
        refusal = 1 -- EPHD_REFUSE_QUEUE_FULL
        push(helper.request({}), "t")
        assert.equals(429, answers[1].status)
        assert.equals("queue_full", cjson.decode(answers[1].body).code)
    end)
end)
