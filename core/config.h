/* The broker's settings: command-line flags and QUEEN_EPHEMERAL_* knobs, one
 * table that parses, validates, prints --help and the boot block. A value the
 * broker cannot use stops it at boot naming the knob; none is replaced. */
#ifndef EPHD_CONFIG_H
#define EPHD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ffi.h"
#include "placement.h"

typedef struct {
  char listen_host[256];
  int listen_port;
  const char *policy_dir;
  /* A candidate policy judged beside the live one from boot; NULL: none. */
  const char *shadow_dir;
  const char *lua_dir;
  const char *database_url;
  uint64_t max_body_bytes;
  uint64_t max_header_bytes;
  uint64_t idle_timeout_s;
  uint64_t header_timeout_ms;
  uint64_t body_timeout_ms;
  uint64_t max_unwritten_bytes;
  uint64_t max_client_bytes;
  uint64_t implicit_idle_s;
  uint64_t refresh_s;
  uint64_t meter_s;
  uint64_t policy_budget_ms;
  uint64_t policy_max_bytes;
  uint64_t max_partitions;
  uint64_t max_groups;
  uint64_t member_ttl_ms;
  int log_debug;           /* log the debug events too (ephd_log_debug) */
  uint64_t metrics_queues; /* /metrics lists this many deepest queues */
  uint64_t handover_timeout_ms;
  uint64_t handover_max_bytes;
  /* The relay (core/cell/peer_client.h): its deadline and its limits. */
  uint64_t relay_timeout_ms;
  uint64_t relay_max_conns, relay_max_parked, relay_max_queued, relay_max_idle;
  uint64_t relay_pipes, relay_tenant_parked;
  uint64_t relay_idle_timeout_ms, relay_resolve_ttl_ms;
  uint64_t relay_max_peer_bytes;
  /* Where the other brokers of a cell reach this one: http://host:port. */
  char advertise[EPHD_MEMBER_ADDRESS_MAX];
  /* The cell's shared secret for the relay's forward mark; NULL: none. */
  const char *cell_token;
  ephd_config_t lua; /* the part Lua reads through ephd_ffi_config() */
} ephd_settings_t;

/* Returns 0, or 1 when --help/--version was answered, or -1 after printing
 * what is wrong to stderr. */
int ephd_config_load(ephd_settings_t *s, int argc, char **argv,
                     const char *default_policy_dir,
                     const char *default_lua_dir);
void ephd_config_log(const ephd_settings_t *s);

#endif
