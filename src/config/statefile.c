/* statefile.c: the state file kept up to date (the generated secret, the quota used) and its
 * lock (one mtproxy per state file). */
#include "config/statefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "config/options.h"
#include "config/reload.h"
#include "users/users.h"

int statefile_save(struct state_saver *sv, const struct gen *g, int final)
{
    const struct options *o = &g->opt;
    char *q = NULL;
    size_t qcap = 0;
    users_quota_roll(sv->users, o->limits, o->nlimits, (int64_t)time(NULL)); /* /month ... */
    if (users_state_format(sv->users, &q, &qcap) < 0) {
        free(q);
        return -1;
    }
    int rolled = sv->resets != sv->users->resets;
    /* nothing to keep, and no file whose lines would go stale (a usage gone to 0 without a
     * reset here: another instance's reset through limits-store) */
    if (!q[0] && !g->state_secret && !rolled && !sv->last && access(o->state_file, F_OK)) {
        free(q);
        return 0;
    }
    if (sv->last && !strcmp(sv->last, q) && !rolled) {
        free(q);
        return 0;
    }
    char err[600];
    const struct secret *s = g->state_secret && o->nsecrets ? &o->secrets[0] : NULL;
    if (options_save_state_text(s, q, o->state_file, err, sizeof err)) {
        log_warn("%s%s", err, final ? "" : " (retried in a few seconds)");
        free(q);
        return -1;
    }
    free(sv->last);
    sv->last = q;
    sv->resets = sv->users->resets;
    return 0;
}

/* The pid the lock file names if that process is alive (a running mtproxy), else 0. */
static long live_holder(int fd)
{
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    long pid = strtol(text, NULL, 10);
    if (pid <= 0 || pid == (long)getpid())
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM ? pid : 0;
}

int statefile_lock_wait(const char *state_file, int wait_ms, int (*poll)(void *), void *arg,
                        char *err, size_t errlen)
{
    char path[OPT_PATH_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", state_file);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EACCES) /* another user's lock file: locked, not written */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open lock file %.200s: %s", path, strerror(errno));
        return -1;
    }
    for (int waited = 0;; waited += 20) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            /* a pid left by a proxy that was killed names no holder now */
            if (ftruncate(fd, 0) != 0 && errno != EBADF && errno != EINVAL)
                log_warn("cannot clear %s: %s", path, strerror(errno));
            return fd;
        }
        if (errno != EWOULDBLOCK || live_holder(fd) || waited >= wait_ms ||
            (poll && poll(arg)))
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    snprintf(err, errlen, "another mtproxy is running with state file %.200s (%.200s is "
                          "locked): give each instance its own state-file", state_file, path);
    close(fd);
    return -2;
}

int statefile_lock(const char *state_file, char *err, size_t errlen)
{
    return statefile_lock_wait(state_file, 0, NULL, NULL, err, errlen);
}

void statefile_note_pid(int fd)
{
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        log_warn("cannot write the pid into the state file's lock file: %s", strerror(errno));
}
