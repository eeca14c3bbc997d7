/* webpage.h: the WEB proxy v1 bridge page (docs/web.md 3, 4): HTML, inline script, its CSP. */
#ifndef MTPROXY_WEB_WEBPAGE_H
#define MTPROXY_WEB_WEBPAGE_H

#include <stddef.h>

#include "core/sbuf.h"
#include "web/websess.h"

#define WEBPAGE_NONCE_LEN 22 /* base64url of 16 random bytes: never 43, so never a token */
#define WEBPAGE_CSP_MAX 512 /* about 250 besides the host name (at most 253) */

/*
 * The page answers `GET /?bridge=CAP` (no-store). It holds no capability and loads nothing:
 * one inline script, allowed by a fresh nonce in the Content-Security-Policy. The script:
 *   - takes the app's boundary: the injected TelegramWebProxy object (with the #android=NONCE
 *     fragment, answered by tproxy-android-init), or a MessageChannel port handed over by a
 *     parent at a numeric loopback origin (tproxy-init);
 *   - sends the app's HELLO to POST /api/v1/session with the bootstrap token as its bearer,
 *     hands the WELCOME back, then runs the carrier the server chose: the HTTPS long poll
 *     (/up with X-Up-Seq, /down with X-Down-Cursor, retries by exact replay) or WebSocket,
 *     each for the whole session or, in the lanes carriers, one lane per stream (X-Lane-ID,
 *     or a socket of its own).
 * The bootstrap token appears as `bootstrap="TOKEN"` and in a `'Bearer TOKEN'` header literal,
 * the two forms the independent clients read it from.
 */

/* Appends the page for the bootstrap token (WEBSESS_TOKEN_LEN base64url characters) and the
 * carrier mode to out, and writes its Content-Security-Policy header value into csp (its
 * connect-src names wss://host, host being the canonical web-host). Returns 0, or -1 (a
 * malformed token or host, no random bytes for the nonce, or out of memory). */
int webpage_render(const char *token, enum websess_mode mode, const char *host,
                   struct sbuf *out, char csp[WEBPAGE_CSP_MAX]);

#endif
