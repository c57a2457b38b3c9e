/* The codes and statuses of lua/ephd/codes.lua as tables, and the error
 * body C writes. */
#include "errors.h"

#include <string.h>

#include "json.h"

static const struct {
  const char *name;
  int status;
} codes[] = {
#define EPHD_CODE_ROW(id, code, status) {code, status},
    EPHD_CODES(EPHD_CODE_ROW)
#undef EPHD_CODE_ROW
};

static const struct {
  int status;
  const char *reason;
} statuses[] = {
#define EPHD_STATUS_ROW(status, reason) {status, reason},
    EPHD_STATUSES(EPHD_STATUS_ROW)
#undef EPHD_STATUS_ROW
};

const char *ephd_code_name(ephd_code_t code) { return codes[code].name; }

int ephd_code_status(ephd_code_t code) { return codes[code].status; }

size_t ephd_status_index(int status) {
  size_t i = 0;
  while (i < EPHD_STATUS_COUNT && statuses[i].status != status) i++;
  return i;
}

int ephd_status_at(size_t i) { return statuses[i].status; }

const char *ephd_status_reason(int status) {
  size_t i = ephd_status_index(status);
  return i < EPHD_STATUS_COUNT ? statuses[i].reason : "Unknown";
}

void ephd_error_write(ephd_buf_t *o, ephd_code_t code, const char *message) {
  ephd_buf_appends(o, "{\"error\":");
  ephd_json_write_string(o, message, strlen(message));
  ephd_buf_appends(o, ",\"code\":\"");
  ephd_buf_appends(o, codes[code].name);
  ephd_buf_appends(o, "\"}");
}
