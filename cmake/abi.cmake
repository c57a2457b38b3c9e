# Turns core/ffi.h into the Lua module ephd.abi: the header minus its
# preprocessor lines, as a string for ffi.cdef. One source, so the C and Lua
# sides of the boundary cannot disagree.
file(STRINGS "${HEADER}" lines)
set(body "")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^#")
    string(APPEND body "${line}\n")
  endif()
endforeach()
file(WRITE "${OUTPUT}.tmp"
  "-- Generated from core/ffi.h by cmake/abi.cmake; do not edit.\nreturn [==[\n${body}]==]\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
