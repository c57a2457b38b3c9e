#include "clock.h"

#include "ffi.h"

static uv_loop_t *loop;

void ephd_clock_init(uv_loop_t *l) { loop = l; }

uint64_t ephd_ffi_now_ms(void) { return uv_now(loop); }

double ephd_ffi_wall_time(void) {
  uv_timeval64_t tv;
  uv_gettimeofday(&tv);
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}
