/* What an answer can say, as C names it: the error codes and the statuses
 * of lua/ephd/codes.lua (generated into ephd_codes.h by the build), and the
 * one writer of an error body C sends. */
#ifndef EPHD_ERRORS_H
#define EPHD_ERRORS_H

#include <stddef.h>

#include "buf.h"
#include "ephd_codes.h"

typedef enum {
#define EPHD_CODE_ENUM(id, code, status) id,
  EPHD_CODES(EPHD_CODE_ENUM)
#undef EPHD_CODE_ENUM
      EPHD_CODE_COUNT
} ephd_code_t;

enum {
#define EPHD_STATUS_ONE(status, reason) +1
  EPHD_STATUS_COUNT = 0 EPHD_STATUSES(EPHD_STATUS_ONE)
#undef EPHD_STATUS_ONE
};

const char *ephd_code_name(ephd_code_t code);
int ephd_code_status(ephd_code_t code);

/* Where status is in the list (0..EPHD_STATUS_COUNT - 1), or
 * EPHD_STATUS_COUNT for a status the list lacks. */
size_t ephd_status_index(int status);
int ephd_status_at(size_t i);
/* The reason phrase of the status line; "Unknown" for a status the list
 * lacks. */
const char *ephd_status_reason(int status);

/* An error body, {"error": message, "code": code}, appended to o: every
 * one C answers goes through here. */
void ephd_error_write(ephd_buf_t *o, ephd_code_t code, const char *message);

#endif
