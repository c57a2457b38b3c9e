/* Tenant ids are UUIDs (8-4-4-4-12 hex digits), as in Queen's tables. A
 * tenant arrives on every request of a multi-tenant broker (the
 * x-queen-tenant header, the forward mark), and Lua's pattern matcher
 * cannot be compiled by the JIT: checked here, it costs a request no trace
 * exit. */
#ifndef EPHD_UUID_H
#define EPHD_UUID_H

#include <stddef.h>

#define EPHD_UUID_LEN 36

/* Whether p is a UUID in lowercase, the form the broker keeps tenants in. */
int ephd_uuid_canonical(const char *p, size_t len);

#endif
