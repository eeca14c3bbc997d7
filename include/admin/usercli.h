/* usercli.h: `mtproxy user ...`: users managed through the running proxy's API, or on users-file when it is stopped. */
#ifndef MTPROXY_PROXY_USERCLI_H
#define MTPROXY_PROXY_USERCLI_H

#include <stdio.h>

/* Runs `mtproxy user ARGV...` (argv[0] the command: add, list, show, set, disable, enable,
 * del, rotate, reset-quota). How it decides where the change goes: STATE-FILE.lock taken
 * (statefile_lock_wait: another `mtproxy user` is waited for) -> the proxy is stopped: the
 * same API calls served in this process (api_new_offline) on users-file / the state file,
 * read and written under the lock (a proxy that starts meanwhile waits for it); else the
 * config's `api` answers a connect -> the API (its token from the config); else the running
 * proxy holds the lock -> an error, nothing changed. Prints
 * for a person, or with --json the API's answer. Returns the exit code: 0 done, 1 refused
 * (API or validation error), 2 usage or configuration error. */
int usercli_main(int argc, char **argv);

/* The usage text of `mtproxy user`. */
void usercli_usage(FILE *f);

#endif
