/* A queue's groups are the cell's. On one broker, a group that has popped
 * a queue is known to all of it: every partition keeps each message until
 * every group known has passed it. In a cell each member holds its own
 * copy of the queue (the partitions it owns), and a member that never saw
 * a group would free, once the other groups took them, messages that
 * group has not read. So the edge, serving a client's pop whose group its
 * own copy of the queue does not know, first announces the group to every
 * member of its view, itself included: a marked pop of the whole queue
 * with notify and no wait, which makes the queue and the group where it
 * lands and takes nothing (routing.c lets it through to the commit).
 * Sent before the pop is served, and not awaited: a member that does not
 * take it learns the group at its own first pop of it, or at the group's
 * next pop after a member joins (docs/cell.md, "A queue's groups"). */
#ifndef EPHD_GROUPS_H
#define EPHD_GROUPS_H

#include <stddef.h>

#include "ffi.h"
#include "placement.h"

/* Announces the group of req, a client's pop, to every member of view
 * when this broker's copy of the queue does not know it, or when a member
 * joined since this broker last announced it: a newcomer handed none of
 * the queue's partitions knows none of its groups. That last is kept in a
 * fixed table by a hash of (tenant, queue, group): a collision costs one
 * more announcement, never one less. */
void ephd_groups_announce(const ephd_request_t *req, const ephd_view_t *view,
                          const char *tenant, size_t tenant_len);

#endif
