/* startup.c: what start-up checks before it writes anything, and --check-config reports: the
 * run user, the directories of the files it writes, the listen addresses, the state file's
 * lock. */
#include "config/startup.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"

void startup_lookup_user(struct run_user *u, const char *name)
{
    snprintf(u->name, sizeof u->name, "%s", name);
    struct passwd *pw = name[0] ? getpwnam(name) : NULL;
    u->found = pw != NULL;
    u->uid = pw ? pw->pw_uid : (uid_t)-1;
    u->gid = pw ? pw->pw_gid : (gid_t)-1;
}

int startup_drop_privileges(const struct run_user *u)
{
    if (!u->found) {
        log_error("user '%s' does not exist", u->name);
        return -1;
    }
    if (setgroups(0, NULL) != 0 || setgid(u->gid) != 0 || setuid(u->uid) != 0) {
        log_error("cannot switch to user '%s': %s", u->name, strerror(errno));
        return -1;
    }
    return 0;
}

/* 1 if path's directory exists and that user (u; NULL: this process) may create files in
 * it. Checked in a child that takes the user's identity. */
static int dir_ok(const char *path, const struct run_user *pw, int *missing)
{
    char dir[OPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    struct stat st;
    *missing = stat(dir, &st) != 0 || !S_ISDIR(st.st_mode);
    if (*missing)
        return 0;
    if (!pw || geteuid() != 0 || pw->uid == 0)
        return access(dir, W_OK | X_OK) == 0;
    pid_t child = fork();
    if (child == 0) {
        if (setgroups(0, NULL) || setgid(pw->gid) || setuid(pw->uid))
            _exit(2);
        _exit(access(dir, W_OK | X_OK) == 0 ? 0 : 1);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) < 0)
        return 1; /* cannot tell: start-up will say */
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void check_file_dir(const char *key, const char *path, const struct run_user *pw,
                           const char *who, struct config_errors *e)
{
    int missing = 0;
    if (dir_ok(path, pw, &missing))
        return;
    if (missing)
        config_error(e, "%s %.200s: its directory does not exist", key, path);
    else
        config_error(e, "%s %.200s: its directory is not writable by %.63s", key, path, who);
}

/* Binds each listen address once without SO_REUSEPORT (which would let a second mtproxy share
 * the port and split the clients between two sets of secrets): in use, not an address of
 * this machine, or a privileged port are found before anything is written. */
static void check_listen(const struct options *o, int check_only, struct config_errors *e,
                         int *busy)
{
    for (int i = 0; i < o->nlisten; i++) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&o->listen[i], a, sizeof a);
        for (int j = 0; j < i; j++)
            if (o->listen[j].len == o->listen[i].len &&
                !memcmp(&o->listen[j].u, &o->listen[i].u, o->listen[i].len))
                config_error(e, "listen %s is given twice", a);
        int fd = socket(o->listen[i].u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (o->listen[i].u.sa.sa_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        int rc = bind(fd, &o->listen[i].u.sa, o->listen[i].len) == 0 ? listen(fd, 1) : -1;
        int err = errno;
        close(fd);
        if (rc == 0)
            continue;
        if (err == EADDRINUSE && check_only)
            fprintf(stderr, "mtproxy: warning: listen %s is in use now: start-up fails unless "
                            "that is this proxy, running\n", a);
        else if (err == EADDRINUSE && ++*busy)
            config_error(e, "listen %s: the address is in use (another mtproxy or another server "
                            "listens there)", a);
        else if (err == EADDRNOTAVAIL)
            config_error(e, "listen %s: not an address of this machine", a);
        else if (err == EACCES)
            config_error(e, "listen %s: ports below 1024 need root or the CAP_NET_BIND_SERVICE "
                            "capability (setcap cap_net_bind_service=+ep on the binary, or "
                            "AmbientCapabilities=CAP_NET_BIND_SERVICE in the systemd unit)", a);
        else
            config_error(e, "listen %s: %s", a, strerror(err));
    }
}

/* Everything that start-up would fail on after the config parsed: checked before anything
 * is written (and by --check-config). busy counts the errors that are a port or the lock held
 * by another process. */
void startup_check(const struct options *o, const struct run_user *u, int check_only,
                   int locked, struct config_errors *e, int *busy)
{
    const struct run_user *pw = NULL;
    if (o->user[0]) {
        pw = u->found ? u : NULL;
        if (!pw)
            config_error(e, "user '%s' does not exist", o->user);
        else if (geteuid() != 0 && geteuid() != pw->uid)
            config_error(e, "user = %s: only root can switch to another user", o->user);
    }
    /* Files written before privileges are dropped (log, pidfile, a generated secret) need
     * this process's rights; the quota is saved after, as the user: with a quota limit the
     * state file's directory must be the user's. */
    int quota = 0;
    for (int i = 0; i < o->nlimits; i++)
        quota |= o->limits[i].quota != 0;
    check_file_dir("state-file", o->state_file, quota ? pw : NULL,
                   quota && pw ? o->user : "this user", e);
    if (strcmp(o->log, "stderr") && strcmp(o->log, "syslog"))
        check_file_dir("log", o->log, NULL, "this user", e);
    if (o->pidfile[0])
        check_file_dir("pidfile", o->pidfile, NULL, "this user", e);
    /* The API rewrites users-file (a temporary file in its directory, then a rename) as the
     * user the process runs as. */
    if (o->api_on && o->users_file[0])
        check_file_dir("users-file", o->users_file, pw, pw ? o->user : "this user", e);
    check_listen(o, check_only, e, busy);
    char path[OPT_PATH_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", o->state_file);
    int fd = locked ? -1 : open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (check_only)
                fprintf(stderr, "mtproxy: warning: state file %s is in use by a running "
                                "mtproxy: start-up fails unless that is this proxy\n",
                        o->state_file);
            else if (++*busy)
                config_error(e, "another mtproxy is running with state file %.200s: give each "
                                "instance its own state-file", o->state_file);
        }
        close(fd);
    }
}

/* Prints every configuration error (stderr) with the count. */
void startup_print_errors(const struct config_errors *e)
{
    int shown = e->count < CONFIG_MAX_ERRORS ? e->count : CONFIG_MAX_ERRORS;
    for (int i = 0; i < shown; i++)
        fprintf(stderr, "%s\n", e->msg[i]);
    if (e->count > shown)
        fprintf(stderr, "... and %d more errors\n", e->count - shown);
    fprintf(stderr, "mtproxy: %d configuration error%s\n", e->count, e->count == 1 ? "" : "s");
}
