/* A request with only a body and its operation attached, as the scanners
 * take it (the tests of the operation and of the scan's frame); the
 * broker's configuration, which the scanners read, loaded once. */
#ifndef EPHD_TEST_BODY_REQUEST_H
#define EPHD_TEST_BODY_REQUEST_H

#include <string.h>

#include "config.h"
#include "op.h"

static inline void body_configure(void) {
  static ephd_settings_t settings;
  static int done;
  char *argv[] = {"test", NULL};
  if (!done) ephd_config_load(&settings, 1, argv, "/", "/");
  done = 1;
}

static inline ephd_request_t body_request(const char *body) {
  ephd_request_t req;
  memset(&req, 0, sizeof(req));
  req.body.ptr = body;
  req.body.len = strlen(body);
  ephd_op_attach(&req);
  return req;
}

#endif
