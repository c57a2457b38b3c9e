/* The broker's clocks (ephd_ffi_now_ms and ephd_ffi_wall_time in ffi.h): the
 * loop's milliseconds, which every deadline, ttl, lease and rate bucket
 * counts in, and wall-clock seconds for policies such as quiet hours. */
#ifndef EPHD_CLOCK_H
#define EPHD_CLOCK_H

#include <uv.h>

void ephd_clock_init(uv_loop_t *loop);

#endif
