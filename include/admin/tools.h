/* tools.h: the operator's commands `mtproxy links` (links and QR codes) and `mtproxy doctor` (checks with fixes). */
#ifndef MTPROXY_PROXY_TOOLS_H
#define MTPROXY_PROXY_TOOLS_H

#include <stdio.h>

#include "core/config.h"
#include "config/options.h"

/* Prints every user's tg:// and t.me links to f and, with qr, the t.me link's QR code in
 * block characters under each. Returns 0, or 1 if a link could not be made. */
int tools_links(const struct options *o, FILE *f, int qr);

/* Runs every check that can be made from this machine and prints one line per check to f:
 * "OK|WARN|FAIL  check: finding" and, for WARN/FAIL, "      fix: ...". o is the config (NULL
 * if it did not build), me its ME table (middle mode, if its files loaded: the file-descriptor
 * budget counts its links as start-up does, preflight_fds). errors are the
 * configuration's (file:line) errors; with errors, checks that need a valid config are
 * skipped. offline: no DNS lookup and no connection (otherwise the only ones made are a DNS
 * lookup of the fronting domain and public-host and a TCP connect to the fronting host;
 * never to Telegram). Returns the number of FAIL lines. */
struct me_table;
int tools_doctor(const struct options *o, const struct me_table *me,
                 const struct config_errors *errors, int offline, FILE *f);

#endif
