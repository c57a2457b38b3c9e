/* One logfmt line per event on stderr: ts, level, event, then key=value
 * fields, values quoted when they need it. Events, never messages: nothing
 * on the hot path logs per message or per request. */
#ifndef EPHD_LOG_H
#define EPHD_LOG_H

/* Fields are (key, value) string pairs ending with NULL. A "debug" line
 * is written only after ephd_log_debug(1) (QUEEN_EPHEMERAL_LOG_DEBUG). */
void ephd_log(const char *level, const char *event, ...);
void ephd_log_debug(int on);

#endif
