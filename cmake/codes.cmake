# Turns lua/ephd/codes.lua (the error codes with their statuses, and the
# statuses with their reason phrases) into the C header ephd_codes.h: two
# X-macro lists that core/errors.c expands. One source, so C cannot name a
# code or a status the list lacks. Every line of the list that starts a row
# must match a row's form, or the build stops.
file(STRINGS "${LIST}" lines)
set(codes "")
set(statuses "")
foreach(line IN LISTS lines)
  if(line MATCHES "^ *{ *code =")
    if(NOT line MATCHES "^ *{ code = \"([a-z_]+)\", status = ([0-9][0-9][0-9]), layer = \"[a-z]+\" },$")
      message(FATAL_ERROR "${LIST}: not a code row: ${line}")
    endif()
    string(TOUPPER "${CMAKE_MATCH_1}" id)
    string(APPEND codes "  X(EPHD_CODE_${id}, \"${CMAKE_MATCH_1}\", ${CMAKE_MATCH_2}) \\\n")
  elseif(line MATCHES "^ *{ *status =")
    if(NOT line MATCHES "^ *{ status = ([0-9][0-9][0-9]), reason = \"([A-Za-z -]+)\" },$")
      message(FATAL_ERROR "${LIST}: not a status row: ${line}")
    endif()
    string(APPEND statuses "  X(${CMAKE_MATCH_1}, \"${CMAKE_MATCH_2}\") \\\n")
  endif()
endforeach()
if(codes STREQUAL "" OR statuses STREQUAL "")
  message(FATAL_ERROR "${LIST}: no codes or no statuses")
endif()
file(WRITE "${OUTPUT}.tmp"
"/* Generated from lua/ephd/codes.lua by cmake/codes.cmake; do not edit. */
#ifndef EPHD_CODES_H
#define EPHD_CODES_H

/* X(enum name, code, status) */
#define EPHD_CODES(X) \\
${codes}
/* X(status, reason phrase) */
#define EPHD_STATUSES(X) \\
${statuses}
#endif
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
