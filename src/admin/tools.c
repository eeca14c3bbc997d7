/* tools.c: `mtproxy links` and `mtproxy doctor`: what an operator runs by hand. */
#include "admin/tools.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <ifaddrs.h>
#include <libgen.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timex.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn.h"
#include "admin/metrics.h"
#include "upstream/middle.h"
#include "config/preflight.h"
#include "config/prefix.h"
#include "admin/qr.h"
#include "upstream/tlslearn.h"

#ifndef MTPROXY_BUILD_EPOCH
#define MTPROXY_BUILD_EPOCH 0
#endif

int tools_links(const struct options *o, FILE *f, int qr)
{
    char host[256];
    int port = options_link_host(o, host, sizeof host), rc = 0;
    if (qr && !qr_available())
        fprintf(f, "(this build has no libqrencode: links only, no QR codes)\n\n");
    for (int i = 0; i < o->nsecrets; i++) {
        char tg[1024], https[1024], uhost[256];
        snprintf(uhost, sizeof uhost, "%s", host);
        int uport = prefix_link_host(o, i, uhost, sizeof uhost, port); /* listen-prefix */
        if (secret_links(&o->secrets[i], uhost, uport, tg, sizeof tg, https, sizeof https)) {
            fprintf(f, "%s: cannot make a link for host '%s' port %d\n", o->secrets[i].name,
                    uhost, uport);
            rc = 1;
            continue;
        }
        fprintf(f, "user %s:\n  %s\n  %s\n", o->secrets[i].name, tg, https);
        if (o->web_on && !secret_web_links(&o->secrets[i], o->web_host, tg, sizeof tg, https,
                                           sizeof https))
            fprintf(f, "  %s\n  %s\n", tg, https); /* WEB proxy (web-listen) */
        if (qr && qr_available()) {
            fputc('\n', f);
            qr_terminal(https, f);
        }
        fputc('\n', f);
    }
    return rc;
}

/* --- doctor ------------------------------------------------------------------------------ */

struct doc {
    FILE *f;
    int fails, warns;
};

static void say(struct doc *d, const char *level, const char *check, const char *fix,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void say(struct doc *d, const char *level, const char *check, const char *fix,
                const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(d->f, "%-4s  %s: %s\n", level, check, msg);
    if (fix && level[0] != 'O')
        fprintf(d->f, "      fix: %s\n", fix);
    d->fails += level[0] == 'F';
    d->warns += level[0] == 'W';
}

static void check_clock(struct doc *d, const struct options *o)
{
    time_t now = time(NULL);
    const char *fix = "set the clock and keep it synchronised (systemd-timesyncd, chrony or "
                      "ntpd; on OpenWrt: System > System > Time Synchronization)";
    if (MTPROXY_BUILD_EPOCH && now < (time_t)MTPROXY_BUILD_EPOCH - 86400) {
        char t[32], c[32];
        time_t b = (time_t)MTPROXY_BUILD_EPOCH;
        struct tm tm;
        strftime(t, sizeof t, "%Y-%m-%d", gmtime_r(&b, &tm));
        strftime(c, sizeof c, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tm));
        say(d, o->tls_ignore_time ? "WARN" : "FAIL", "clock", fix,
            "the clock says %s, before this build was made (%s): a FakeTLS proxy whose "
            "clock is off by more than tls-time-skew refuses every client", c, t);
        return;
    }
    struct timex tx;
    memset(&tx, 0, sizeof tx);
    int st = adjtimex(&tx);
    if (st == TIME_ERROR || (st >= 0 && (tx.status & STA_UNSYNC))) {
        say(d, "WARN", "clock", fix,
            "the kernel says the clock is not synchronised (no NTP client running?); FakeTLS "
            "clients are refused when it drifts past tls-time-skew");
        return;
    }
    say(d, "OK", "clock", NULL, "synchronised");
}

/* The descriptors the proxy would need (preflight_fds: what start-up fits max-connections
 * to) against the hard limit. */
static void check_fds(struct doc *d, const struct options *o, const struct me_table *me)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        say(d, "WARN", "file limit", NULL, "cannot read RLIMIT_NOFILE: %s", strerror(errno));
        return;
    }
    struct preflight_fds b;
    preflight_fds(o, preflight_workers(o), me, (unsigned long long)rl.rlim_max, &b);
    long long need = b.need;
    if (b.fits) {
        say(d, "OK", "file limit", NULL,
            "hard limit %llu fits max-connections %d (%lld descriptors needed)",
            (unsigned long long)rl.rlim_max, o->max_connections, need);
        return;
    }
    char fix[256];
    snprintf(fix, sizeof fix, "raise it to %lld: LimitNOFILE=%lld in the systemd unit, "
             "`ulimit -n %lld` before starting, or nofile in /etc/security/limits.conf; or "
             "lower max-connections", need, need, need);
    say(d, b.fit < 256 ? "FAIL" : "WARN", "file limit", fix,
        "hard limit %llu descriptors fits %lld of max-connections %d (each needs 2)",
        (unsigned long long)rl.rlim_max, b.fit, o->max_connections);
}

/* The running mtproxy on this state file: the pid its lock file names (statefile_lock),
 * 0 if the lock is free or cannot be read, -1 if it is held but names no pid yet. */
static long state_holder(const char *state_file)
{
    char path[OPT_PATH_MAX + 8], text[32];
    snprintf(path, sizeof path, "%s.lock", state_file);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    long pid = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN); /* free: nobody runs on it */
    } else if (errno == EWOULDBLOCK) {
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = 0;
        pid = strtol(text, NULL, 10);
        if (pid <= 0)
            pid = -1;
    }
    close(fd);
    return pid;
}

/* 1 if process pid has a TCP socket listening on port, 0 if not, -1 if its descriptors cannot
 * be read (another user's process). From /proc/net/tcp{,6} and /proc/PID/fd. */
static int pid_listens(long pid, int port)
{
    unsigned long inodes[64];
    int ninodes = 0;
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        FILE *f = fopen(tables[t], "re");
        char line[512];
        if (!f)
            continue;
        while (fgets(line, sizeof line, f) && ninodes < 64) {
            char local[64];
            unsigned st;
            unsigned long inode;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %63s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) ==
                    3 && st == 0x0A) {
                char *colon = strrchr(local, ':');
                if (colon && strtol(colon + 1, NULL, 16) == port)
                    inodes[ninodes++] = inode;
            }
        }
        fclose(f);
    }
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
    DIR *dp = opendir(dir);
    if (!dp)
        return -1;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(dp))) {
        char link[sizeof dir + sizeof de->d_name + 1], target[64];
        snprintf(link, sizeof link, "%s/%s", dir, de->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        unsigned long inode;
        if (n <= 0)
            continue;
        target[n] = 0;
        if (sscanf(target, "socket:[%lu]", &inode) == 1)
            for (int i = 0; i < ninodes && !found; i++)
                found = inodes[i] == inode;
    }
    closedir(dp);
    return found;
}

/* holder: state_holder's answer, so a port in use by this proxy, running, is no failure. */
static void check_port(struct doc *d, const char *what, const struct sock_addr *a, long holder)
{
    char text[SOCK_ADDR_STRLEN], check[80];
    sock_addr_format(a, text, sizeof text);
    snprintf(check, sizeof check, "%s %s", what, text);
    int fd = socket(a->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) {
        say(d, "FAIL", check, "enable that address family", "socket: %s", strerror(errno));
        return;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int err = bind(fd, &a->u.sa, a->len) == 0 ? 0 : errno;
    if (!err) {
        say(d, "OK", check, NULL, "free");
    } else if (err == EADDRINUSE && holder != 0 &&
               (holder < 0 || pid_listens(holder, sock_addr_port(a)) != 0)) {
        if (holder > 0)
            say(d, "OK", check, NULL, "in use by this proxy (pid %ld), running", holder);
        else
            say(d, "OK", check, NULL, "in use by this proxy, starting");
    } else if (err == EADDRINUSE && holder > 0) {
        say(d, "FAIL", check, "stop what listens there (`ss -ltnp`) or choose another port",
            "already in use, not by this proxy (pid %ld)", holder);
    } else if (err == EADDRINUSE) {
        say(d, "FAIL", check, "stop what listens there (`ss -ltnp`) or choose another port; "
            "if it is this mtproxy, already running, ignore this", "already in use");
    } else if (err == EACCES) {
        say(d, "FAIL", check, "run as root with `user` set, or give the binary the capability: "
            "setcap cap_net_bind_service=+ep $(command -v mtproxy) (systemd: "
            "AmbientCapabilities=CAP_NET_BIND_SERVICE)",
            "a port below 1024 needs privilege");
    } else if (err == EADDRNOTAVAIL) {
        say(d, "FAIL", check, "listen on an address of this machine, or 0.0.0.0 / [::]",
            "not an address of this machine");
    } else {
        say(d, "FAIL", check, NULL, "bind: %s", strerror(err));
    }
    close(fd);
}

/* 1 if sa is an address of one of this machine's interfaces. */
static int is_local(const struct sockaddr *sa)
{
    struct ifaddrs *ifs, *i;
    int found = 0;
    if (getifaddrs(&ifs) != 0)
        return 0;
    for (i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET)
            found = !memcmp(&((const struct sockaddr_in *)sa)->sin_addr,
                            &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
        else if (sa->sa_family == AF_INET6)
            found = !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                            &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
    }
    freeifaddrs(ifs);
    return found;
}

/* Connects to ai within 3 s. Returns 0, or an errno value. */
static int try_connect(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rc = errno;
        if (rc == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            socklen_t l = sizeof rc;
            if (poll(&p, 1, 3000) != 1)
                rc = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &l) != 0)
                rc = errno;
        }
    }
    close(fd);
    return rc;
}

static void check_fronting(struct doc *d, const struct options *o, int offline)
{
    const char *names[64];
    int n = 0;
    if (o->mask_host[0]) {
        names[n++] = o->mask_host;
    } else {
        for (int i = 0; i < o->nsecrets && n < 64; i++) {
            const struct secret *s = &o->secrets[i];
            int dup = s->kind != SECRET_EE;
            for (int j = 0; j < n && !dup; j++)
                dup = !strcmp(names[j], s->domain);
            if (!dup)
                names[n++] = s->domain;
        }
    }
    if (!n) {
        say(d, "OK", "fronting", NULL, "no ee secret and no mask-host: nothing to front to");
        return;
    }
    for (int k = 0; k < n; k++) {
        char check[300];
        snprintf(check, sizeof check, "fronting %s:%d", names[k], o->mask_port);
        if (offline) {
            say(d, "OK", check, NULL, "not checked (--offline)");
            continue;
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        char port[8];
        snprintf(port, sizeof port, "%d", o->mask_port);
        int rc = getaddrinfo(names[k], port, &hints, &res);
        if (rc != 0) {
            say(d, "FAIL", check, "check the domain and this machine's DNS (resolv.conf); "
                "probes are held instead of fronted until it resolves",
                "does not resolve: %s", gai_strerror(rc));
            continue;
        }
        int local = 0;
        for (struct addrinfo *a = res; a; a = a->ai_next)
            local |= is_local(a->ai_addr);
        if (local) {
            say(d, "WARN", check, "use the domain of a real site that is not hosted here: a "
                "censor who resolves it finds this proxy's own address",
                "resolves to this machine (a tell)");
        } else {
            int e = try_connect(res);
            if (e)
                say(d, "FAIL", check, "choose a domain whose site answers from here, or set "
                    "mask-host", "cannot connect: %s", strerror(e));
            else
                say(d, "OK", check, NULL, "resolves and answers");
        }
        freeaddrinfo(res);
    }
}

static void check_public_host(struct doc *d, const struct options *o, int offline)
{
    if (!o->public_host[0]) {
        char host[256];
        options_link_host(o, host, sizeof host);
        say(d, "WARN", "public-host", "set public-host to the name or address clients reach",
            "not set: links use '%s'", host);
        return;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *res;
    int rc = getaddrinfo(o->public_host, NULL, &hints, &res);
    if (rc != 0) {
        if (offline) {
            say(d, "OK", "public-host", NULL, "%s: not resolved (--offline)", o->public_host);
            return;
        }
        hints.ai_flags = 0;
        rc = getaddrinfo(o->public_host, NULL, &hints, &res);
    }
    if (rc != 0) {
        say(d, "FAIL", "public-host", "fix the DNS record, or put the address itself",
            "%s does not resolve: %s", o->public_host, gai_strerror(rc));
        return;
    }
    int local = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        local |= is_local(a->ai_addr);
    freeaddrinfo(res);
    if (local)
        say(d, "OK", "public-host", NULL, "%s is an address of this machine", o->public_host);
    else
        say(d, "WARN", "public-host", "fine behind NAT or a port forward; otherwise the links "
            "point at another machine", "%s is not an address of this machine",
            o->public_host);
}

/* The directory of path must exist and be writable (we write path atomically there). */
static void check_dir(struct doc *d, const char *what, const char *path)
{
    char copy[OPT_PATH_MAX], check[64];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    snprintf(check, sizeof check, "%s", what);
    char fix[OPT_PATH_MAX + 128];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(fix, sizeof fix, "mkdir -p %s, owned by the user mtproxy runs as", dir);
        say(d, "FAIL", check, fix, "directory %s of %s does not exist", dir, path);
    } else if (access(dir, W_OK) != 0) {
        snprintf(fix, sizeof fix, "chown the directory %s to the user mtproxy runs as", dir);
        say(d, "FAIL", check, fix, "directory %s is not writable here", dir);
    } else {
        say(d, "OK", check, NULL, "%s can be written", path);
    }
}

/* Middle mode: both of Telegram's files load, and were refreshed lately (Telegram changes
 * the ME list; packaging/mtproxy-update-config fetches it daily). */
static void check_proxy_config(struct doc *d, const struct options *o)
{
    if (!o->middle) {
        say(d, "OK", "proxy-config", NULL, "direct mode (no ad-tag): not used");
        return;
    }
    const char *fix = "run mtproxy-update-config (packaging/) and enable its daily timer or cron "
                      "line";
    char err[512];
    struct me_table *t = middle_table_load(o, err, sizeof err);
    if (!t) {
        say(d, "FAIL", "proxy-config", fix, "%s", err);
        return;
    }
    middle_table_put(t);
    const char *files[2] = {o->proxy_config_file, o->proxy_secret_file};
    time_t now = time(NULL);
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (stat(files[i], &st) != 0)
            continue;
        double days = difftime(now, st.st_mtime) / 86400;
        if (i == 0 && days > 7) {
            say(d, "FAIL", "proxy-config", fix, "%s is %.0f days old: ME addresses change",
                files[i], days);
            return;
        }
        if (i == 0 && days > 2) {
            say(d, "WARN", "proxy-config", fix, "%s is %.1f days old", files[i], days);
            return;
        }
    }
    say(d, "OK", "proxy-config", NULL, "%s and %s load, refreshed within 2 days",
        o->proxy_config_file, o->proxy_secret_file);
}

/* FakeTLS: which first flight our ServerHello imitates (the profile the running proxy
 * learned from the fronting site, kept next to the state file), for information. */
static void check_tls_profile(struct doc *d, const struct options *o)
{
    const char *sni = o->mask_host;
    for (int i = 0; !sni[0] && i < o->nsecrets; i++)
        if (o->secrets[i].kind == SECRET_EE)
            sni = o->secrets[i].domain;
    if (!sni[0] || !o->tls_profile)
        return;
    char text[512];
    tlslearn_describe_file(o->state_file, sni, (int64_t)time(NULL), text, sizeof text);
    say(d, "OK", "tls-profile", NULL, "%s", text);
}

int tools_doctor(const struct options *o, const struct me_table *me,
                 const struct config_errors *errors, int offline, FILE *f)
{
    struct doc d = {.f = f};
    if (!o) { /* the config could not be built: its errors are all there is to say */
        for (int i = 0; i < errors->count && i < CONFIG_MAX_ERRORS; i++)
            say(&d, "FAIL", "config", "edit the line named (mtproxy --help lists every key)",
                "%s", errors->msg[i]);
        fprintf(f, "(the other checks need a configuration that loads)\n%d failed\n", d.fails);
        return d.fails ? d.fails : 1;
    }
    if (errors->count) {
        int shown = errors->count < CONFIG_MAX_ERRORS ? errors->count : CONFIG_MAX_ERRORS;
        for (int i = 0; i < shown; i++)
            say(&d, "FAIL", "config", "edit the line named (mtproxy --help lists every key)",
                "%s", errors->msg[i]);
    } else {
        say(&d, "OK", "config", NULL, "valid (%d listen address%s, %d user%s)", o->nlisten,
            o->nlisten == 1 ? "" : "es", o->nsecrets, o->nsecrets == 1 ? "" : "s");
    }
    check_clock(&d, o);
    check_fds(&d, o, me);
    long holder = state_holder(o->state_file);
    for (int i = 0; i < o->nlisten; i++)
        check_port(&d, "listen", &o->listen[i], holder);
    if (o->metrics_on) {
        check_port(&d, "metrics", &o->metrics_addr, holder);
        struct metrics_shared ms;
        metrics_shared_init(&ms, o, NULL, NULL, 0, NULL);
        if (!ms.loopback && !o->metrics_token[0])
            say(&d, "WARN", "metrics", "put it on 127.0.0.1 and use an SSH tunnel, or set "
                "metrics-token", "served on a public address without metrics-token");
    }
    check_fronting(&d, o, offline);
    check_public_host(&d, o, offline);
    check_proxy_config(&d, o);
    check_tls_profile(&d, o);
    check_dir(&d, "state-file", o->state_file);
    if (o->pidfile[0])
        check_dir(&d, "pidfile", o->pidfile);
    if (strcmp(o->log, "stderr") && strcmp(o->log, "syslog"))
        check_dir(&d, "log", o->log);
    fprintf(f, "%d failed, %d warning%s\n", d.fails, d.warns, d.warns == 1 ? "" : "s");
    return d.fails;
}
