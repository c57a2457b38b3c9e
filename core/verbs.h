/* The FFI entry points of the verbs (declared in ffi.h): scanning the hot
 * bodies, calling the engine, and writing the hot answers, so payload bytes
 * never pass through Lua. Also the wake and timeout paths of parked pops. */
#ifndef EPHD_VERBS_H
#define EPHD_VERBS_H

#include <uv.h>

#include "engine.h"
#include "gate.h"

void ephd_verbs_init(ephd_engine_t *engine, uv_loop_t *loop);
void ephd_verbs_close(void);
int ephd_verbs_waiter_wake(ephd_waiter_t *w);
void ephd_verbs_waiter_timeout(ephd_waiter_t *w);

#endif
