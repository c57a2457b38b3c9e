/* The in-process broker the fuzz targets speak to: the whole daemon (HTTP,
 * Lua, engine) on a loopback port, driven one input at a time. */
#ifndef EPHD_FUZZ_HARNESS_H
#define EPHD_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Boots the broker; the harness's LLVMFuzzerInitialize calls it. */
void ephd_fuzz_boot(void);
/* Sends bytes over a fresh connection, written in pieces whose sizes come
 * from seed (so a request torn across packets is fuzzed too), runs the loop
 * until the broker has answered or closed, then disconnects. */
void ephd_fuzz_exchange(const uint8_t *bytes, size_t len, uint8_t seed);

#endif
