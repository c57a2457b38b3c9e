-- A top level whose error handler never returns: xpcall runs it before
-- unwinding, inside the debug hook that raised, unless the sandbox moves
-- it after the unwinding.
xpcall(function()
    while true do end
end, function()
    while true do end
end)
