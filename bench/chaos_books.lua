-- The judge of bench/chaos's books (bench/chaos.lua says what each count
-- means). judge(books, groups, t_start) reads:
--   books.pushes       { first, n, partition, broker, status, code, t0, t1 }:
--                      payloads first .. first + n - 1, in the order sent
--   books.payload_push payload -> index in books.pushes
--   books.deliveries   { payload, id, group, partition, broker, t0, t1,
--                      ack = { status, outcome, t0, t1 } }, in the order
--                      their pops were answered
--   books.fault        { killed_at, victim_partitions } for kill -9
-- and returns the counts, with samples of what went wrong. Every judgement
-- is by causality (which send came after which answer, on one clock),
-- never by elapsed time.
local _M = {}

function _M.judge(books, groups, t_start)
    local r = {
        answered_201 = 0, refused = 0, uncertain = 0,
        delivered = {}, lost = {}, lost_allowed = {}, lost_by_partition = {},
        phantom = 0, misplaced = 0, refused_but_delivered = 0,
        uncertain_delivered = 0,
        duplicates_allowed = {}, violations = {},
        samples = { lost = {}, violations = {} },
    }
    local victim_parts = {}
    for _, p in ipairs(books.fault.victim_partitions or {}) do
        victim_parts[p] = true
    end
    local function outcome_of(push)
        if push.status == 201 then return "ok" end
        if push.code == "ephemeral_forward_failed"
                or push.code:find("^transport:") then
            return "uncertain"
        end
        return "refused"
    end
    for _, push in ipairs(books.pushes) do
        local o = outcome_of(push)
        if o == "ok" then r.answered_201 = r.answered_201 + push.n
        elseif o == "refused" then r.refused = r.refused + push.n
        else r.uncertain = r.uncertain + push.n end
    end
    -- Deliveries by (payload, group), in the order their pops were answered
    -- (the books are appended in that order).
    local by = {}
    for _, d in ipairs(books.deliveries) do
        local key = tostring(d.payload) .. " " .. d.group
        local list = by[key]
        if not list then
            list = {}
            by[key] = list
        end
        list[#list + 1] = d
    end
    local function violate(kind, d, extra)
        r.violations[kind] = (r.violations[kind] or 0) + 1
        if #r.samples.violations < 50 then
            r.samples.violations[#r.samples.violations + 1] = {
                kind = kind, payload = d.payload, group = d.group, id = d.id,
                partition = d.partition, broker = d.broker, extra = extra }
        end
    end
    local function allow(kind)
        r.duplicates_allowed[kind] = (r.duplicates_allowed[kind] or 0) + 1
    end
    for _, list in pairs(by) do
        local d1 = list[1]
        local pi = type(d1.payload) == "number" and books.payload_push[d1.payload]
        local push = pi and books.pushes[pi]
        if not push then
            r.phantom = r.phantom + 1
            violate("phantom", d1)
        else
            if push.partition ~= d1.partition then
                r.misplaced = r.misplaced + 1
                violate("misplaced", d1, push.partition)
            end
            local o = outcome_of(push)
            if o == "refused" then
                r.refused_but_delivered = r.refused_but_delivered + 1
                violate("refused_but_delivered", d1, push.code)
            elseif o == "uncertain" then
                r.uncertain_delivered = r.uncertain_delivered + 1
            end
        end
        -- Duplicates, by cause.
        local acked = {}
        for _, d in ipairs(list) do
            if d.ack and d.ack.outcome == "acked" then acked[#acked + 1] = d end
        end
        if #acked > 1 then violate("double_completed", acked[2]) end
        for i = 2, #list do
            local d = list[i]
            local cause
            for _, a in ipairs(acked) do
                if a ~= d and d.t0 > a.t1 then
                    -- Served after a was served: a's lease was live until
                    -- its ack, which completed it.
                    if d.t0 > a.ack.t1 then cause = "delivered_after_ack"
                    elseif d.t1 < a.ack.t0 then cause = "lease_twice"
                    else cause = "lease_twice_or_after_ack" end
                    break
                end
            end
            if cause then
                violate(cause, d)
            else
                local prev = list[i - 1]
                local o = prev.ack and prev.ack.outcome or "none"
                if o == "stale" or o == "unknown" or o == "redelivered" then
                    allow("after_" .. o)
                elseif o == "none" then allow("after_lease_expiry")
                elseif o:find("^failed:") then allow("after_ack_failed")
                elseif d.t0 < prev.t1 then allow("unordered")
                else allow("after_" .. o) end
            end
        end
    end
    -- Lost: answered 201, never given to some group.
    for _, g in ipairs(groups) do
        r.delivered[g], r.lost[g], r.lost_allowed[g] = 0, 0, 0
    end
    for _, push in ipairs(books.pushes) do
        if push.status == 201 then
            for j = 0, push.n - 1 do
                local p = push.first + j
                for _, g in ipairs(groups) do
                    if by[p .. " " .. g] then
                        r.delivered[g] = r.delivered[g] + 1
                    elseif victim_parts[push.partition]
                            and push.t0 < books.fault.killed_at then
                        r.lost_allowed[g] = r.lost_allowed[g] + 1
                    else
                        r.lost[g] = r.lost[g] + 1
                        r.lost_by_partition[push.partition] =
                            (r.lost_by_partition[push.partition] or 0) + 1
                        if #r.samples.lost < 50 then
                            r.samples.lost[#r.samples.lost + 1] = {
                                payload = p, group = g,
                                partition = push.partition,
                                broker = push.broker,
                                answered_s = push.t1 - t_start }
                        end
                    end
                end
            end
        end
    end

    local lost, allowed, violations = 0, 0, 0
    for _, g in ipairs(groups) do
        lost = lost + r.lost[g]
        allowed = allowed + r.lost_allowed[g]
    end
    for _, n in pairs(r.violations) do violations = violations + n end
    r.lost_total, r.lost_allowed_total, r.violations_total =
        lost, allowed, violations
    return r
end

return _M
