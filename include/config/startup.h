/* startup.h: what start-up checks before it writes anything, and --check-config reports: the
 * run user, the directories of the files it writes, the listen addresses, the state file's
 * lock. */
#ifndef MTPROXY_CONFIG_STARTUP_H
#define MTPROXY_CONFIG_STARTUP_H

#include <sys/types.h>

#include "core/config.h"
#include "config/options.h"

/* The account `user` names, looked up once (getpwnam) at start. */
struct run_user {
    char name[sizeof ((struct options *)0)->user]; /* "": none (stay this process's user) */
    int found;
    uid_t uid;
    gid_t gid;
};

/* Looks up the account name ("": none) into u: found 0 and uid, gid -1 if there is none. */
void startup_lookup_user(struct run_user *u, const char *name);

/* Switches the process to user u (no supplementary groups, its gid, its uid). Returns 0, or
 * -1 (logged: u was not found, or the switch failed). */
int startup_drop_privileges(const struct run_user *u);

/* Everything that start-up would fail on after the config o parsed (u: its `user` looked up),
 * added to e: checked before anything is written (and by --check-config). busy counts the
 * errors that are a port or the state file's lock held by another process; with check_only
 * those are warnings on stderr instead (the proxy checked may be the one running); locked:
 * this process holds the lock already (not checked). */
void startup_check(const struct options *o, const struct run_user *u, int check_only,
                   int locked, struct config_errors *e, int *busy);

/* Prints every configuration error of e (stderr) and then their count. */
void startup_print_errors(const struct config_errors *e);

#endif
