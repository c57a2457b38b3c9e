/* A partition on the wire, for its hand-over to a new owner: the ring's
 * messages in order, and each group's place in them (its cursor, its
 * redeliveries, its leases as redeliveries). Written by the old owner,
 * read by the new one, which merges it into its own ring
 * (ephd_engine_accept). Part of the cell's protocol, like placement's
 * hash: brokers of one cell must read each other's.
 *
 *   ephd-transfer 1\n
 *   <queue len> <partition len> <messages> <groups>\n
 *   <queue><partition>\n
 *   per message, oldest first:  <age ms> <len>\n<payload>\n
 *   per group:                  <name len> <next> <redeliveries>\n<name>\n
 *     then per redelivery:      <index> <attempts>\n
 *
 * Numbers are decimal. A message is named by its index in the list; a
 * group's next is the first it was never given (messages before it it has
 * had, but for its redeliveries). The tenant is not in the body: the
 * forward mark carries it. Payloads are copied as they were pushed
 * (validated JSON then); the reader checks only what it needs to stay
 * safe. */
#ifndef EPHD_TRANSFER_H
#define EPHD_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "engine.h"

#define EPHD_TRANSFER_MEDIA_TYPE "application/vnd.ephd-transfer"

typedef struct {
  uint64_t age_ms;
  uint32_t off, len; /* the payload, in the body */
} ephd_transfer_msg_t;

typedef struct {
  uint32_t index, attempts;
} ephd_transfer_redo_t;

typedef struct {
  uint32_t name_off, name_len;
  uint32_t next;
  uint32_t redo_first, nredo; /* a run of the transfer's redo array */
} ephd_transfer_group_t;

typedef struct ephd_transfer {
  const char *base; /* the body: names and payloads point into it */
  uint32_t queue_off, queue_len, partition_off, partition_len;
  ephd_transfer_msg_t *msgs;
  uint32_t nmsgs;
  uint64_t bytes; /* the payloads' */
  ephd_transfer_group_t *groups;
  uint32_t ngroups;
  ephd_transfer_redo_t *redo;
  uint32_t nredo;
} ephd_transfer_t;

/* Appends r's contents, as of now_ms. A lease travels as a redelivery with
 * attempts + 1, as if it had expired: its holder's ack will answer stale
 * on the old owner. Returns the messages written. */
uint64_t ephd_transfer_write(ephd_buf_t *out, const ephd_queue_t *q,
                             const ephd_ring_t *r, uint64_t now_ms);
/* Reads body into t (arrays allocated; ephd_transfer_free). 0, or -1 with
 * a reason in *why when it is not a well-formed transfer of names up to
 * max_name bytes. */
int ephd_transfer_parse(const char *body, size_t len, size_t max_name,
                        ephd_transfer_t *t, const char **why);
void ephd_transfer_free(ephd_transfer_t *t);

#endif
