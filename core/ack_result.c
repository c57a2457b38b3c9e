#include "ack_result.h"

#include <string.h>

const char *const ephd_ack_outcome_names[4] = {"acked", "redelivered", "stale",
                                               "unknown"};

int ephd_ack_outcome_named(const char *name, size_t len,
                           ephd_outcome_t *outcome) {
  for (int o = 0; o < 4; o++)
    if (strlen(ephd_ack_outcome_names[o]) == len &&
        memcmp(ephd_ack_outcome_names[o], name, len) == 0) {
      *outcome = (ephd_outcome_t)o;
      return 0;
    }
  return -1;
}
