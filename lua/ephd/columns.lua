-- Rows of cells (strings) as a table a person reads in a terminal: columns
-- two spaces apart, each as wide as its widest cell, every line after
-- indent (or none) and without trailing blanks. The CLI's tables and
-- `ephd policy replay`'s are written with it.
local concat, max, rep = table.concat, math.max, string.rep

return function(out, rows, indent)
    local widths = {}
    for _, row in ipairs(rows) do
        for i, cell in ipairs(row) do
            widths[i] = max(widths[i] or 0, #cell)
        end
    end
    for _, row in ipairs(rows) do
        local cells = {}
        for i, cell in ipairs(row) do
            cells[i] = cell .. rep(" ", widths[i] - #cell)
        end
        out:write(indent or "", (concat(cells, "  "):gsub("%s+$", "")), "\n")
    end
end
