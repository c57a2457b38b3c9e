/* The forward mark: what a member of the cell puts on a request it sends
 * another member (a relayed push, pop or ack, a fanned-out admin verb, a
 * hand-over), and what the receiver trusts in place of identity, grant and
 * rate. One header, written and verified only here:
 *
 *   X-Queen-Forward: <tenant> <ms> <sig>
 *
 * ms is the sender's wall clock in milliseconds and sig the lowercase hex
 * HMAC-SHA256, keyed by the cell token, of
 *
 *   "ephd-forward-1\n" ms "\n" tenant "\n" method "\n" target "\n" body length
 *
 * (target: the path, and "?" and the query when there is one). The token
 * itself never crosses the wire: a peer, or anyone reading the cell's
 * traffic, learns no credential from a mark. One mark is good for one
 * method, target and tenant within EPHD_MARK_WINDOW_MS of the receiver's
 * clock, which bounds a replay to that request, that window and a body of
 * that length. The body's bytes are not signed: hashing every relayed byte
 * twice (edge and owner) on the loop costs a millisecond a MiB and buys
 * integrity only against a writer on the path, which signing the rest
 * already keeps from forging any other request (docs/cell.md). The prefix
 * keeps a mark from ever being read as any other HMAC made with the same
 * token. */
#ifndef EPHD_MARK_H
#define EPHD_MARK_H

#include <stddef.h>
#include <stdint.h>

#include "ffi.h"

/* How far the sender's clock may be from the receiver's: a cell's hosts
 * agree within milliseconds (NTP), and a mark is written at each send and
 * stamped again as a relayed request leaves the relay's queue, so only
 * the way there stands between the two. Fixed, not a knob: it is the replay
 * window, and hosts that disagree by more have a broken clock, which the
 * refusals' 401s make loud. */
#define EPHD_MARK_WINDOW_MS 30000

/* The cell token (NULL: none; no mark is written or trusted), which must
 * outlive the broker. 0, or -1 when libcrypto cannot make the HMAC. */
int ephd_mark_init(const char *cell_token);

/* The cell token's HMAC-SHA256 of msg, as 64 lowercase hex digits at out
 * (no NUL): 0, or -1 without a token or when libcrypto fails. What else
 * the cell signs (its membership rows) is signed here, each kind of
 * message with a prefix of its own, so no signature passes for another
 * kind's. */
int ephd_mark_hmac_hex(const char *msg, size_t len, char *out);

/* The bytes of the mark's header line for a tenant, "\r\n" included. */
size_t ephd_mark_size(size_t tenant_len);

/* Writes the mark's header line at p (ephd_mark_size bytes), signed now
 * for method, target (path and query as sent) and body_len, and returns
 * its end. The token must be set. */
char *ephd_mark_write(char *p, const char *tenant, size_t tenant_len,
                      ephd_slice_t method, ephd_slice_t target,
                      size_t body_len);

/* The mark's line for tenant at p, as ephd_mark_write's but unsigned (no
 * member trusts it), for ephd_mark_restamp to sign as it is sent; its end. */
char *ephd_mark_blank(char *p, const char *tenant, size_t tenant_len);

/* The mark at the start of headers (len bytes), for method, target and
 * body_len, signed now in place, its tenant kept; headers that do not
 * start with a mark are left as they are. A relayed request is stamped so
 * as it is written (peer_client.h's stamp), after however long it waited
 * in the relay's queue: the wait does not make its mark expired on
 * arrival, and a request never sent is never signed. */
void ephd_mark_restamp(char *headers, size_t len, ephd_slice_t method,
                       ephd_slice_t target, size_t body_len);

/* The mark of a request as received: EPHD_OK and *tenant (pointing into
 * mark) when it is signed with this cell's token for this method, path,
 * query and body length within the window; EPHD_E_BAD_REQUEST when it is
 * and its tenant is not a canonical UUID; EPHD_E_REFUSED otherwise (no
 * token here, malformed, expired, or signed for another request). */
int ephd_mark_verify(ephd_slice_t mark, ephd_slice_t method, ephd_slice_t path,
                     ephd_slice_t query, size_t body_len, ephd_slice_t *tenant);

#endif
