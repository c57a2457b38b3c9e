/* How a member of the cell is known to another: a peer session per
 * connection, and the forward mark on each request it carries.
 *
 * A connection one member opens to another (for a relayed push, pop or
 * ack, a fanned-out admin verb, a hand-over, a leaving notice) carries on
 * its first request one header more:
 *
 *   X-Queen-Session: <ms> <nonce> <sig>
 *
 * ms is the sender's wall clock in milliseconds, nonce 32 random hex
 * digits, and sig the lowercase hex HMAC-SHA256, keyed by the cell token,
 * of
 *
 *   "ephd-session-1\n" ms "\n" nonce "\n" authority
 *
 * where authority is the receiver's advertised host:port, which the sender
 * dialled and names in Host. The receiver takes the connection for a
 * member's when the signature is its token's, the authority is its own,
 * the time is within EPHD_MARK_WINDOW_MS of its clock and the nonce was
 * not seen within the window: a session header read off the wire cannot
 * open a session anywhere else (the authority), later (the time) or again
 * (the nonce). The token never crosses the wire.
 *
 * Every request a member sends carries the mark, the tenant the edge
 * decided on:
 *
 *   X-Queen-Forward: <tenant>
 *
 * trusted only on a member's connection, where the receiver takes the
 * tenant from it and runs none of identity, grant or rate again. What
 * follows the session on its connection is as good as the session: an
 * off-path sender cannot write into another's TCP stream, and one on the
 * path (who could rewrite any request) is kept out only by a private
 * network or a tunnel, which docs/cell.md asks for. Signing each request
 * instead cost two HMACs per relayed request and left its body unsigned,
 * so a mark read off the wire could carry another body of its length for
 * 30 s; a session costs one HMAC per connection, and nothing read off the
 * wire can be replayed. */
#ifndef EPHD_MARK_H
#define EPHD_MARK_H

#include <stddef.h>
#include <stdint.h>

#include "ffi.h"

/* How far the sender's clock may be from the receiver's: a cell's hosts
 * agree within milliseconds (NTP), and a session is opened as its
 * connection is, so only the way there stands between the two. Fixed, not
 * a knob: it is the replay window, and hosts that disagree by more have a
 * broken clock, which the refusals' 401s make loud. */
#define EPHD_MARK_WINDOW_MS 30000

/* The bytes of the session's header line, "\r\n" included. */
#define EPHD_SESSION_LINE 132

/* The cell token (NULL: none; no session is opened or trusted), which
 * must outlive the broker, and this broker's advertised address (a URL:
 * its authority is what a session must be signed for). 0, or -1 when
 * libcrypto cannot make the HMAC. */
int ephd_mark_init(const char *cell_token, const char *advertise);

/* The cell token's HMAC-SHA256 of msg, as 64 lowercase hex digits at out
 * (no NUL): 0, or -1 without a token or when libcrypto fails. What else
 * the cell signs (its membership rows) is signed here, each kind of
 * message with a prefix of its own, so no signature passes for another
 * kind's. */
int ephd_mark_hmac_hex(const char *msg, size_t len, char *out);

/* The bytes of the mark's header line for a tenant, "\r\n" included. */
size_t ephd_mark_size(size_t tenant_len);

/* Writes the mark's header line at p (ephd_mark_size bytes) and returns
 * its end. */
char *ephd_mark_write(char *p, const char *tenant, size_t tenant_len);

/* Writes the session's header line for the member at authority (its
 * host:port) at out (EPHD_SESSION_LINE bytes), signed now: what the peer
 * client puts on the first request of each connection. The token must be
 * set. */
void ephd_mark_session_write(char *out, const char *authority);

/* A session header as received (its value) on a request whose Host is
 * host: 0 when it opens a member's session here, -1 otherwise (no token
 * here, malformed, another key, another authority, out of the window, a
 * nonce seen, or no room to remember one more). */
int ephd_mark_session_open(ephd_slice_t session, ephd_slice_t host);

/* The tenant of a mark received on a member's connection: EPHD_OK and
 * *tenant (pointing into mark) when it is a canonical UUID,
 * EPHD_E_BAD_REQUEST otherwise. */
int ephd_mark_tenant(ephd_slice_t mark, ephd_slice_t *tenant);

#endif
