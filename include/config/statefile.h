/* statefile.h: the state file kept up to date (the generated secret, the quota used) and its
 * lock (one mtproxy per state file). */
#ifndef MTPROXY_CONFIG_STATEFILE_H
#define MTPROXY_CONFIG_STATEFILE_H

#include <stddef.h>
#include <stdint.h>

struct users;
struct gen;

#define STATEFILE_SAVE_SECONDS 5
#define STATEFILE_LOCK_WAIT_MS 10000 /* an offline `mtproxy user` change, waited for */

/* The state file: the generated secret (if the config has none) and the quota each user has
 * used, rewritten atomically (fs_write_atomic: a crash or a full disk leaves the old file)
 * when it changed, every STATEFILE_SAVE_SECONDS, on reload and at exit. */
struct state_saver {
    struct users *users;
    char *last; /* what was written last */
    uint32_t resets; /* users->resets when it was written (a quota started over since: the
                      * file still holds the old period's line) */
};

/* Writes generation g's state file (quota periods rolled first) if what it holds changed
 * since sv's last write (final: at exit, no retry). Returns 0 (written, or nothing to write),
 * or -1 (logged). */
int statefile_save(struct state_saver *sv, const struct gen *g, int final);

/* Holds an exclusive lock on STATE-FILE.lock for the life of the process: a second mtproxy
 * on the same state file is refused. Returns the descriptor, or -1 with err (-2: the lock is
 * held by another process). */
int statefile_lock(const char *state_file, char *err, size_t errlen);

/* statefile_lock, but a holder that is not a running mtproxy (the lock file names no live
 * process: `mtproxy user` changing users-file or the state file with the proxy stopped, or a
 * proxy still reading its configuration) is waited for, up to wait_ms (poll, if not NULL, is
 * asked every 20 ms and ends the wait when it returns nonzero). The lock file is emptied (the
 * proxy names itself in it later: statefile_note_pid). Returns the descriptor, -2 if the
 * lock stays held, -1 with err if it cannot be opened. */
int statefile_lock_wait(const char *state_file, int wait_ms, int (*poll)(void *), void *arg,
                        char *err, size_t errlen);

/* The lock file names the process that holds it (`mtproxy doctor` tells this proxy's ports
 * from another program's by it): written once the pid is final (after daemonize). */
void statefile_note_pid(int fd);

#endif
