/* A queue's groups announced to the cell: see groups.h. */
#include "groups.h"

#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "delivery.h"
#include "mark.h"
#include "members.h"
#include "op.h"
#include "peer_client.h"
#include "relay_edge.h"

static const char POP_PATH[] = "/api/v1/ephemeral/pop";
static const char NOTIFY[] = "notify=true";

/* The pop's parameters that are not the queue's and the group's: the
 * announcement names no partition and takes nothing. */
static int not_kept(const char *k, size_t n) {
  return !((n == 5 && memcmp(k, "queue", 5) == 0) ||
           (n == 5 && memcmp(k, "group", 5) == 0));
}

/* When each (tenant, queue, group) was last announced, by the joins count
 * then, in a slot chosen by its hash; the hash kept to tell slots apart. */
#define TOLD 4096
static struct { uint64_t hash, joins; } told[TOLD];

void ephd_groups_announce(const ephd_request_t *req, const ephd_view_t *view,
                          const char *tenant, size_t tenant_len) {
  const ephd_pop_args_t *a = &ephd_op_of(req)->pub.pop;
  uint64_t h = ephd_pop_group_hash(tenant, tenant_len, a),
           joins = ephd_members_joins();
  uint32_t slot = (uint32_t)(h % TOLD);
  if (told[slot].hash == h && told[slot].joins == joins &&
      ephd_pop_knows_group(a, tenant, tenant_len))
    return;
  told[slot].hash = h;
  told[slot].joins = joins;
  size_t cap = sizeof(POP_PATH) + req->query.len + sizeof(NOTIFY) + 1;
  size_t hlen = ephd_mark_size(tenant_len);
  char *buf = malloc(cap + hlen);
  if (buf == NULL) abort();
  memcpy(buf, POP_PATH, sizeof(POP_PATH) - 1);
  char *p = buf + sizeof(POP_PATH) - 1;
  char *query = p;
  p = ephd_delivery_query(p, req->query, 1, not_kept);
  char sep = p == query ? '?' : '&';
  *p++ = sep;
  memcpy(p, NOTIFY, sizeof(NOTIFY) - 1);
  p += sizeof(NOTIFY) - 1;
  ephd_slice_t method = {"GET", 3}, target = {buf, (size_t)(p - buf)};
  ephd_mark_write(p, tenant, tenant_len);
  for (uint32_t m = 0; m < view->count; m++) {
    ephd_peer_t *peer = ephd_peer(view->members[m].address);
    if (peer == NULL) continue;
    ephd_peer_request_t rq = {
        .method = method,
        .target = target,
        .headers = {p, hlen},
        .timeout_ms = ephd_relay_timeout_ms(),
    };
    ephd_peer_call_t *call;
    ephd_peer_send(peer, &rq, ephd_peer_ignore, NULL, &call);
  }
  free(buf);
}
