/* main.c: command line, config loading, start-up checks, workers, signals and shutdown. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/replay.h"
#include "core/sdnotify.h"
#include "core/sock.h"
#include "core/worker.h"
#include "web/webhttp.h"
#include "web/websess.h"
#include "crypto/crypto.h"
#include "proto/secret.h"
#include "admin/api.h"
#include "conn/conn.h"
#include "upstream/dc.h"
#include "upstream/fronting.h"
#include "config/lstore.h"
#include "admin/metrics.h"
#include "upstream/middle.h"
#include "config/options.h"
#include "config/preflight.h"
#include "config/prefix.h"
#include "config/reload.h"
#include "config/startup.h"
#include "config/statefile.h"
#include "upstream/tlslearn.h"
#include "admin/tools.h"
#include "admin/usercli.h"
#include "users/users.h"

#define EXIT_CONFIG 2
/* A listen port or the state file's lock is held by another process (an old instance still
 * closing, another server): worth a retry (sysexits.h's EX_TEMPFAIL). */
#define EXIT_BUSY 75
#define STALE_TMP_SECONDS 60 /* a temporary file of ours this old at start is a killed write's */

/* --help's width: the terminal's columns (at least 40), 80 when stdout is not a terminal. */
static size_t help_width(FILE *f)
{
    struct winsize ws;
    if (isatty(fileno(f)) && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col < 40 ? 40 : ws.ws_col;
    return 80;
}

static void usage(FILE *f)
{
    static char help[32768];
    config_help(options_table, options_count, help_width(f), help, sizeof help);
    fprintf(f,
            "mtproxy %s: an MTProto proxy for Telegram.\n\n"
            "Usage:\n"
            "  mtproxy [--config FILE] [--KEY VALUE ...]   run the proxy\n"
            "  mtproxy --check-config [--config FILE] [--KEY VALUE ...]\n"
            "                                            validate the configuration and exit\n"
            "  mtproxy generate-secret [--dd | --tls DOMAIN]\n"
            "                                            print a new random secret\n"
            "  mtproxy links [--config FILE] [--qr | --no-qr] [--KEY VALUE ...]\n"
            "                                            every user's links (and, on a\n"
            "                                            terminal, QR codes)\n"
            "  mtproxy doctor [--config FILE] [--offline] [--KEY VALUE ...]\n"
            "                                            check this machine's setup: one\n"
            "                                            OK/WARN/FAIL line per check\n"
            "  mtproxy user add|list|show|set|disable|enable|del|rotate|reset-quota [NAME]\n"
            "       [--config FILE] [--json] ...        manage users through the running\n"
            "                                            proxy's API, or users-file when it\n"
            "                                            is stopped (mtproxy user --help)\n"
            "  mtproxy user rotate-address NAME [--config FILE] [--KEY VALUE ...]\n"
            "                                            listen-prefix: give user NAME a new\n"
            "                                            address (the running proxy is sent\n"
            "                                            SIGHUP; the old one serves for\n"
            "                                            listen-prefix-grace)\n"
            "  mtproxy --help | --version\n\n"
            "Every config file key can be given as --KEY VALUE (the command line wins; a\n"
            "repeatable key given on the command line replaces the file's values).\n\n"
            "Exit codes: 0 done; 1 a failure at run time (doctor: a check failed); 2 a\n"
            "configuration error; 75 a listen port or the state file's lock is held by\n"
            "another process (retry later).\n\n"
            "Keys:\n%s",
            MTPROXY_VERSION, help);
}

static int generate_secret(int argc, char **argv)
{
    struct secret s = {.kind = SECRET_PLAIN};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dd") == 0) {
            s.kind = SECRET_DD;
        } else if (strcmp(argv[i], "--tls") == 0 && i + 1 < argc) {
            s.kind = SECRET_EE;
            snprintf(s.domain, sizeof s.domain, "%s", argv[++i]);
        } else {
            fprintf(stderr, "mtproxy: generate-secret [--dd | --tls DOMAIN]: bad argument "
                            "'%s'\n", argv[i]);
            return EXIT_CONFIG;
        }
    }
    char hex[SECRET_HEX_MAX + 1], err[256];
    if (preflight_draw_key(&s)) {
        fprintf(stderr, "mtproxy: no random source\n");
        return 1;
    }
    if (secret_to_hex(&s, hex, sizeof hex) < 0 || secret_parse(NULL, hex, &s, err, sizeof err)) {
        fprintf(stderr, "mtproxy: generate-secret: bad domain '%s'\n", s.domain);
        return EXIT_CONFIG;
    }
    printf("%s\n", hex);
    return 0;
}

/* The links carry the secrets, so they never go to the log (a journal or a shared log file is
 * read by more people than the config): to stdout when it is a terminal, and to links-file
 * (default: the state-file's path + ".links"), written 0600 like the state file. */
static void print_links(const struct options *o, uid_t owner)
{
    char host[256];
    int port = options_link_host(o, host, sizeof host);
    int tty = !o->daemonize && isatty(STDOUT_FILENO);
    size_t cap = (size_t)o->nsecrets * 4400 + 1, n = 0;
    char *text = malloc(cap);
    if (!text)
        return;
    text[0] = 0;
    for (int i = 0; i < o->nsecrets; i++) {
        char tg[1024], https[1024], uhost[256];
        snprintf(uhost, sizeof uhost, "%s", host);
        int uport = prefix_link_host(o, i, uhost, sizeof uhost, port); /* listen-prefix */
        if (secret_links(&o->secrets[i], uhost, uport, tg, sizeof tg, https, sizeof https))
            continue;
        n += (size_t)snprintf(text + n, cap - n, "secret %s: %s\nsecret %s: %s\n",
                              o->secrets[i].name, tg, o->secrets[i].name, https);
        if (o->web_on && !secret_web_links(&o->secrets[i], o->web_host, tg, sizeof tg, https,
                                           sizeof https)) /* WEB proxy mode */
            n += (size_t)snprintf(text + n, cap - n, "secret %s: %s\nsecret %s: %s\n",
                                  o->secrets[i].name, tg, o->secrets[i].name, https);
    }
    if (tty) {
        fputs(text, stdout);
        fflush(stdout);
    }
    char path[OPT_PATH_MAX + 8];
    if (strcmp(o->links_file, "off") == 0)
        path[0] = 0;
    else if (o->links_file[0])
        snprintf(path, sizeof path, "%s", o->links_file);
    else
        snprintf(path, sizeof path, "%s.links", o->state_file);
    char err[600];
    if (path[0] && fs_write_atomic(path, text, n, 0600, owner, err, sizeof err))
        log_warn("links-file: %s", err);
    else if (path[0])
        log_info("links of %d secret%s written to %s", o->nsecrets, o->nsecrets == 1 ? "" : "s",
                 path);
    else if (!tty)
        log_info("links not shown: stdout is not a terminal and links-file is off");
    free(text);
    if (!o->public_host[0])
        log_info("links use host '%s'; set public-host to the address clients reach", host);
}

/* The pidfile, written atomically (no planted symlink or leftover followed) and given to the
 * user the process will run as, so that it can still remove it (or, in a directory that user
 * cannot write, empty it) at exit. */
static int write_pidfile(const char *path, uid_t owner)
{
    char pid[32], err[600];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (fs_write_atomic(path, pid, (size_t)n, 0644, owner, err, sizeof err)) {
        log_error("pidfile: %s", err);
        return -1;
    }
    return 0;
}

static void remove_pidfile(const char *path)
{
    if (unlink(path) == 0 || errno == ENOENT)
        return;
    int e = errno;
    /* Its directory is not ours to change after dropping privileges: leave it empty (a pid
     * no init script will mistake for a live process) and say how to avoid it. */
    if (truncate(path, 0) == 0)
        log_warn("pidfile %s emptied, not removed (%s): give the user a directory of its own "
                 "for it, e.g. /run/mtproxy", path, strerror(e));
    else
        log_warn("cannot remove pidfile %s: %s", path, strerror(e));
}

/* One line per user who has done anything (SIGUSR1 and at exit); never a secret. */
static void log_user_stats(const struct users *u)
{
    uint32_t n = users_count(u);
    for (uint32_t id = 0; id < n; id++) {
        struct user_totals t;
        users_stats_sum(u, id, &t);
        uint64_t refused = 0;
        for (int r = 0; r < UR_COUNT; r++)
            refused += t.refused[r];
        if (!t.conns && !refused && !t.quota_used)
            continue;
        char fleet[64] = ""; /* limits-store: the other instances' live counts */
        if (u->fleet)
            snprintf(fleet, sizeof fleet, " fleet_conns %u fleet_ips %u",
                     atomic_load(&users_shared(u, id)->fleet_conns),
                     atomic_load(&users_shared(u, id)->fleet_ips));
        log_info("user %s: conns %llu active %llu bytes_up %llu bytes_down %llu "
                 "quota_used %llu closed_limit %llu%s refused conns %llu ips %llu quota %llu "
                 "expired %llu disabled %llu store %llu",
                 users_name(u, id), (unsigned long long)t.conns, (unsigned long long)t.active,
                 (unsigned long long)t.bytes_up, (unsigned long long)t.bytes_down,
                 (unsigned long long)t.quota_used, (unsigned long long)t.closed_limit, fleet,
                 (unsigned long long)t.refused[UR_CONNS], (unsigned long long)t.refused[UR_IPS],
                 (unsigned long long)t.refused[UR_QUOTA],
                 (unsigned long long)t.refused[UR_EXPIRED],
                 (unsigned long long)t.refused[UR_DISABLED],
                 (unsigned long long)t.refused[UR_STORE]);
    }
}

/* The SIGUSR1 lines: the counter table's (proxy/counters.h), with the workers' own and the DC
 * pools' counters beside them. */
static void log_stats(struct proxy_worker *pws, struct worker *ws, int n)
{
    struct proxy_stats s;
    memset(&s, 0, sizeof s);
    unsigned long long fd_limit = 0, pauses = 0, busy[2] = {0};
    unsigned long long pool[DCPOOL_NCOUNTERS] = {0};
    for (int i = 0; i < n; i++) {
        proxy_stats_add(&s, &pws[i].stats);
        int p = 0;
#define LOG_POOL_SUM(f, label) pool[p++] += STAT_GET(&pws[i].dcpool.stats.f);
        DCPOOL_COUNTERS(LOG_POOL_SUM)
#undef LOG_POOL_SUM
        fd_limit += STAT_GET(&ws[i].stats.accept_fd_limit);
        busy[0] += STAT_GET(&ws[i].stats.busy_hits);
        busy[1] += STAT_GET(&ws[i].stats.busy_misses);
        pauses += STAT_GET(&ws[i].stats.accept_pauses);
    }
    char line[1024];
    log_info("stats:%s accept_fd_limit %llu accept_pauses %llu",
             counters_log_line(&s, COUNTERS_LOG_MAIN, line, sizeof line), fd_limit, pauses);
    log_info("stats:%s", counters_log_line(&s, COUNTERS_LOG_LIMITS, line, sizeof line));
    log_info("stats: relay%s busy_hits %llu busy_misses %llu",
             counters_log_line(&s, COUNTERS_LOG_RELAY, line, sizeof line), busy[0], busy[1]);
    char acc[256];
    size_t alen = 0;
    for (int i = 0; i < n && alen < sizeof acc - 32; i++) /* how evenly SO_REUSEPORT spreads */
        alen += (size_t)snprintf(acc + alen, sizeof acc - alen, " w%d %llu", i,
                                 (unsigned long long)STAT_GET(&pws[i].stats.accepted));
    log_info("stats: per-worker accepted:%s", acc);
    log_info("stats:%s", counters_log_line(&s, COUNTERS_LOG_TLS, line, sizeof line));
    if (n > 0 && pws[0].learn && pws[0].tls_enabled && pws[0].opt->tls_profile) {
        char prof[320];
        tlsprofile_describe(tlslearn_current(pws[0].learn), (int64_t)time(NULL), prof,
                            sizeof prof);
        log_info("stats: tls profile in use: %s", prof);
    }
    log_info("stats:%s", counters_log_line(&s, COUNTERS_LOG_ACCESS, line, sizeof line));
    if (n > 0 && pws[0].users && pws[0].users->fleet) {
        struct lstore_view lv;
        lstore_read(pws[0].users->fleet, &lv);
        log_info("stats: limits_store_up %d limits_store_flushes %llu limits_store_failures %llu "
                 "limits_store_commands %llu limits_store_users %llu limits_store_instances %llu",
                 lv.state == LSTORE_UP, (unsigned long long)lv.flushes,
                 (unsigned long long)lv.failures, (unsigned long long)lv.commands,
                 (unsigned long long)lv.users, (unsigned long long)lv.instances);
    }
    size_t len = 0;
    for (int r = 0; r < CR_COUNT; r++)
        len += (size_t)snprintf(line + len, sizeof line - len, " %s %llu", conn_reason_name(r),
                                (unsigned long long)STAT_GET(&s.closed[r]));
    log_info("stats: closed:%s", line);
    len = 0;
#define LOG_POOL(f, label) \
    len += (size_t)snprintf(line + len, sizeof line - len, " %s %llu", #f, pool[p++]);
    int p = 0;
    DCPOOL_COUNTERS(LOG_POOL)
#undef LOG_POOL
    log_info("stats: dc_pool%s", line);
    if (pws[0].opt->middle)
        log_info("stats: me%s", counters_log_line(&s, COUNTERS_LOG_ME, line, sizeof line));
    if (n && pws[0].users)
        log_user_stats(pws[0].users);
}

static void log_acl(const struct acl *acl)
{
    if (acl_active(acl))
        log_info("access list: %zu allow and %zu deny ranges (%zu bytes)%s",
                 cidr_set_count(&acl->allow), cidr_set_count(&acl->deny),
                 cidr_set_memory(&acl->allow) + cidr_set_memory(&acl->deny),
                 acl->has_allow ? ": only allowed sources are served" : "");
}

/* What the process holds from start to exit (main's phases share it). */
struct app {
    /* configure: the command line and the first generation */
    const char *config_path;
    int check_only, links_cmd, doctor_cmd;
    const char *rotate_name;  /* `user rotate-address NAME` */
    int qr, offline;          /* links: -1 = QR codes on a terminal; doctor: no network */
    char **args;              /* the `--key value` arguments (every reload reads them again) */
    struct reload rl;
    struct reload_start start;
    struct config_errors errs;
    struct gen *g;            /* the running generation */
    struct gen_reaper reaper; /* the proxy's generations are freed here (main, the reloader) */
    struct reloader reloader; /* SIGHUP's reload runs there, at idle priority */
    struct run_user user;
    /* preflight */
    sigset_t sigs;            /* what the run waits for */
    int log_opened, lock_fd;
    struct users users;
    struct replay *replay;
    struct tlslearn learn;
    /* workers */
    int nworkers, nstarted;
    struct worker *ws;
    struct proxy_worker *pws;
    struct metrics_shared mshared;
    struct metrics_server *msrv;
    struct webgroup *web;      /* WEB proxy mode's servers (one per worker), or NULL */
    struct api_reloads api_rl; /* the management API waits on these for its reloads */
    struct lstore *lstore;     /* limits-store's flusher, or NULL */
    /* detach and run */
    char pidfile[OPT_PATH_MAX];
    struct state_saver saver;
    int resets_asked;         /* the state file had quota-reset lines (offline reset-quota) */
    int ran;                  /* the run ended on SIGTERM/SIGINT: stop in order */
};

#define APP_ON (-1) /* a phase's "go on"; anything else is the exit code */

/* The command line: a subcommand (links, doctor), --check-config, --config, --help, --version;
 * the rest are `--key value` for the config. */
static int app_args(struct app *a, int argc, char **argv)
{
    a->links_cmd = argc >= 2 && !strcmp(argv[1], "links");
    a->doctor_cmd = argc >= 2 && !strcmp(argv[1], "doctor");
    a->qr = -1;
    int nrest = 0, first = 1 + (a->links_cmd || a->doctor_cmd);
    if (argc >= 2 && !strcmp(argv[1], "user")) {
        if (argc < 4 || strcmp(argv[2], "rotate-address") || argv[3][0] == '-') {
            fprintf(stderr, "mtproxy: usage: mtproxy user rotate-address NAME [--config FILE]\n");
            return EXIT_CONFIG;
        }
        a->rotate_name = argv[3];
        first = 4;
    }
    if (!(a->args = calloc((size_t)argc + 1, sizeof *a->args)))
        return 1;
    for (int i = first; i < argc; i++) {
        if (a->links_cmd && (!strcmp(argv[i], "--qr") || !strcmp(argv[i], "--no-qr"))) {
            a->qr = argv[i][2] == 'q';
        } else if (a->doctor_cmd && !strcmp(argv[i], "--offline")) {
            a->offline = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("mtproxy %s\n", MTPROXY_VERSION);
            return 0;
        } else if (!strcmp(argv[i], "--check-config")) {
            a->check_only = 1;
        } else if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mtproxy: --config needs a file\n");
                return EXIT_CONFIG;
            }
            a->config_path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            a->config_path = argv[i] + 9;
        } else {
            a->args[nrest++] = argv[i];
        }
    }
    reload_init(&a->rl, NULL, a->config_path, nrest, a->args);
    return APP_ON;
}

/* The first generation, built by the path every reload takes (proxy/reload.h), whole before
 * it is checked: for the proxy with start-up's part (the generated secret, the fd fit, the
 * users registry). links and doctor are done with it here. */
static int app_configure(struct app *a)
{
    int run = !a->links_cmd && !a->doctor_cmd && !a->check_only && !a->rotate_name;
    a->rl.tool = a->links_cmd || a->doctor_cmd || a->rotate_name;
    if (run) {
        a->rl.lock_wait_ms = STATEFILE_LOCK_WAIT_MS; /* users-file read under the lock */
        a->rl.users = &a->users;
        a->rl.start = &a->start;
        a->rl.reaper = &a->reaper;
    }
    a->g = reload_build(&a->rl, NULL, &a->errs);
    a->rl.start = NULL;
    struct gen *g = a->g;
    if (g && a->rl.tool && !g->opt.nsecrets) {
        /* No secret configured: the one the proxy generated and keeps in state-file (read
         * only; if there is none yet, none is made here). */
        char e[CONFIG_ERR_LEN];
        if (options_load_state(&g->opt, g->opt.state_file, e, sizeof e) < 0)
            config_error(&a->errs, "%s", e);
    }
    if (a->doctor_cmd) /* its own checks, with a fix for each (the config's errors first) */
        return tools_doctor(g ? &g->opt : NULL, g ? g->me : NULL, &a->errs, a->offline, stdout)
                   ? 1 : 0;
    if (a->rotate_name)
        return g ? prefix_rotate_cmd(&g->opt, a->rotate_name, stdout) : EXIT_CONFIG;
    if (a->links_cmd && g) {
        if (a->errs.count) {
            startup_print_errors(&a->errs);
            return EXIT_CONFIG;
        }
        if (!g->opt.nsecrets) {
            fprintf(stderr, "mtproxy: no secret configured and no state file (%s) yet: start "
                            "the proxy once, or add secret lines\n", g->opt.state_file);
            return 1;
        }
        return tools_links(&g->opt, stdout, a->qr < 0 ? isatty(STDOUT_FILENO) : a->qr);
    }
    return APP_ON;
}

/* Everything start-up would fail on later, checked now (and by --check-config). */
static int app_check(struct app *a)
{
    struct gen *g = a->g;
    int busy = 0;
    if (g) {
        startup_lookup_user(&a->user, g->opt.user);
        startup_check(&g->opt, &a->user, a->check_only, a->rl.lock_fd >= 0, &a->errs, &busy);
    }
    if (a->errs.count) {
        startup_print_errors(&a->errs);
        return a->errs.count == busy ? EXIT_BUSY : EXIT_CONFIG;
    }
    if (!a->check_only)
        return APP_ON;
    const struct options *o = &g->opt;
    const struct me_table *me = g->me;
    if (me)
        printf("middle-proxy mode: %d ME address%s, proxy secret of %zu bytes\n",
               me->naddrs, me->naddrs == 1 ? "" : "es", me->secret_len);
    size_t nacl = cidr_set_count(&g->acl.allow) + cidr_set_count(&g->acl.deny);
    printf("configuration OK (%d listen address%s, %d secret%s, %d dc line%s, %zu "
           "access-list range%s)\n",
           o->nlisten, o->nlisten == 1 ? "" : "es", o->nsecrets, o->nsecrets == 1 ? "" : "s",
           o->ndcs, o->ndcs == 1 ? "" : "s", nacl, nacl == 1 ? "" : "s");
    return 0;
}

/* The replay cache: the window covers a hello stamped at the edge of the future skew until it
 * falls off the past skew; with tls-ignore-time the cache is FIFO only. */
static int app_replay(struct app *a)
{
    const struct options *opt = &a->g->opt;
    if (!opt->replay_cache)
        return APP_ON;
    struct replay_config rc = {.window = opt->tls_ignore_time ? 0
                                                              : 2 * (opt->tls_time_skew_ms / 1000)};
    rc.max_entries = opt->replay_cache / 36 + 1;
    while (rc.max_entries > 1 && replay_memory_for(&rc) > opt->replay_cache)
        rc.max_entries -= rc.max_entries / 16 + 1;
    if (!(a->replay = replay_new(&rc))) {
        log_error("cannot allocate the replay cache (%zu bytes)", opt->replay_cache);
        return 1;
    }
    log_info("replay cache: %zu entries, %zu bytes, window %u s", rc.max_entries,
             replay_memory_for(&rc), rc.window);
    return APP_ON;
}

/* Signals, the log, the state file's lock and a drawn secret saved in it, the descriptor
 * limit, the replay cache, the TLS profile learner. */
static int app_preflight(struct app *a)
{
    const struct options *o = &a->g->opt;
    /* Block the signals main waits for before anything is bound, so a SIGTERM that arrives
     * during start-up is taken by sigwait (clean exit 0), not by the default action; the
     * workers inherit the mask. */
    sigemptyset(&a->sigs);
    sigaddset(&a->sigs, SIGTERM);
    sigaddset(&a->sigs, SIGINT);
    sigaddset(&a->sigs, SIGHUP);
    sigaddset(&a->sigs, SIGUSR1);
    sigaddset(&a->sigs, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &a->sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    if (log_open(o->log, (enum log_level)o->log_level, err, sizeof err)) {
        fprintf(stderr, "mtproxy: %s\n", err);
        return EXIT_CONFIG;
    }
    a->log_opened = 1;
    /* One mtproxy per state file: the lock is held for the life of the process. */
    a->lock_fd = a->rl.lock_fd; /* taken before users-file was read (app_configure) */
    a->rl.lock_fd = -1;
    if (a->lock_fd < 0 && (a->lock_fd = statefile_lock(o->state_file, err, sizeof err)) < 0) {
        log_error("%s", err);
        return a->lock_fd == -2 ? EXIT_BUSY : EXIT_CONFIG;
    }
    /* what a write killed midway left (kill -9, power loss): ours, no longer written */
    char links[OPT_PATH_MAX + 8] = "";
    if (!o->links_file[0])
        snprintf(links, sizeof links, "%s.links", o->state_file);
    else if (strcmp(o->links_file, "off"))
        snprintf(links, sizeof links, "%s", o->links_file);
    const char *const written[] = {o->state_file, links, o->users_file};
    for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) {
        int n = written[i][0] ? fs_remove_stale_tmp(written[i], STALE_TMP_SECONDS) : 0;
        if (n)
            log_info("removed %d stale temporary file%s of %s", n, n == 1 ? "" : "s", written[i]);
    }
    if (a->start.secret_drawn) {
        if (options_save_state(&o->secrets[0], o->state_file, err, sizeof err)) {
            log_error("%s", err);
            return EXIT_CONFIG;
        }
        log_info("no secret configured: generated one and saved it in %s", o->state_file);
    }
    /* RLIMIT_NOFILE raised to its hard limit, which the build fitted max-connections to. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (!a->start.fds.fits)
        log_warn("max-connections %d needs %lld file descriptors but RLIMIT_NOFILE is %llu: "
                 "using max-connections %d",
                 a->start.max_connections, a->start.fds.need, a->start.fds.limit,
                 o->max_connections);
    reload_commit(&a->rl, a->g);
    int rc = app_replay(a);
    if (rc != APP_ON)
        return rc;
    if (tlslearn_init(&a->learn, o, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_CONFIG;
    }
    return APP_ON;
}

/* The management API's listener, on the metrics server's thread. */
static int app_api(struct app *a)
{
    const struct options *opt = &a->g->opt;
    char err[512], s[SOCK_ADDR_STRLEN];
    int fd = sock_listen(&opt->api_addr, 128, 1, NULL, err, sizeof err);
    if (fd < 0 || metrics_server_add_api(a->msrv, fd, &a->api_rl)) {
        log_error("api: %s", fd < 0 ? err : "out of memory");
        return 1;
    }
    sock_addr_format(&opt->api_addr, s, sizeof s);
    log_info("management API on http://%s/api/v1/ (token required)%s", s,
             opt->users_file[0] ? "" : "; no users-file: users cannot be changed through it");
    return APP_ON;
}

/* The metrics server: one listener, served by a thread of its own (started with the workers);
 * the management API's listener too if set (with no metrics listener if metrics is off). */
static int app_metrics(struct app *a)
{
    const struct options *opt = &a->g->opt;
    char err[512];
    metrics_shared_init(&a->mshared, opt, a->pws, a->ws, a->nworkers, a->replay);
    a->mshared.web = a->web; /* app_web ran before: NULL when WEB mode is off */
    if (!opt->metrics_on) {
        if (!(a->msrv = metrics_server_new(&a->mshared, a->g, -1)))
            return 1;
        return app_api(a);
    }
    int fd = sock_listen(&opt->metrics_addr, 128, 1, NULL, err, sizeof err);
    if (fd < 0) {
        log_error("metrics: %s", err);
        return 1;
    }
    if (!(a->msrv = metrics_server_new(&a->mshared, a->g, fd))) {
        log_error("metrics: out of memory");
        return 1;
    }
    char s[SOCK_ADDR_STRLEN];
    sock_addr_format(&opt->metrics_addr, s, sizeof s);
    log_info("metrics on http://%s/ (/metrics, /stats)%s", s,
             opt->metrics_token[0] ? ", token required"
             : a->mshared.loopback ? "" : "; no metrics-token: the page shows no links");
    return opt->api_on ? app_api(a) : APP_ON;
}

/* Worker i: its loop, its proxy state (and middle mode's links), its listeners. */
static int app_worker(struct app *a, int i)
{
    const struct options *opt = &a->g->opt;
    char err[512];
    if (worker_init(&a->ws[i], i, NULL, NULL, NULL, NULL) ||
        proxy_worker_init(&a->pws[i], &a->ws[i], a->g, &a->users, a->replay, a->nworkers)) {
        log_error("cannot set up worker %d", i);
        return 1;
    }
    if (a->g->me && middle_init(&a->pws[i])) {
        log_error("cannot set up middle-proxy mode in worker %d", i);
        return 1;
    }
    a->pws[i].learn = &a->learn;
    for (int l = 0; l < opt->nlisten; l++) {
        int fd = sock_listen(&opt->listen[l], opt->backlog, 1, &a->pws[i].sockopts, err,
                             sizeof err);
        if (fd < 0) {
            int e = errno;
            log_error("%s", err);
            return e == EADDRINUSE ? EXIT_BUSY : 1;
        }
        int mss = opt->client_mss;
        if (mss && setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss) != 0) {
            log_error("client-mss %d: %s", mss, strerror(errno));
            return 1;
        }
        worker_add_listener(&a->ws[i], fd);
    }
    if (opt->prefix_on) { /* every address of the prefix: [::]:PORT, the user told by address */
        struct sock_addr any = {.len = sizeof any.u.in6};
        any.u.in6.sin6_family = AF_INET6;
        any.u.in6.sin6_port = htons((uint16_t)opt->prefix_port);
        int fd = sock_listen(&any, opt->backlog, 1, &a->pws[i].sockopts, err, sizeof err);
        if (fd < 0 || worker_add_listener_tag(&a->ws[i], fd, PROXY_LISTENER_PREFIX)) {
            log_error("listen-prefix: %s", fd < 0 ? err : "too many listeners");
            return 1;
        }
    }
    return APP_ON;
}

/* WEB proxy mode (web-listen): a server on each worker's loop (at most WEB_MAX_WORKERS), each
 * with its own SO_REUSEPORT listener; a request reaching a worker that does not hold its token
 * is handed to the one that does. */
static int app_web(struct app *a)
{
    const struct options *opt = &a->g->opt;
    char err[512], s[SOCK_ADDR_STRLEN];
    int n = a->nworkers < WEB_MAX_WORKERS ? a->nworkers : WEB_MAX_WORKERS;
    int fds[WEB_MAX_WORKERS];
    for (int i = 0; i < n; i++) {
        fds[i] = sock_listen(&opt->web_addr, opt->backlog, n > 1, NULL, err, sizeof err);
        if (fds[i] < 0) {
            log_error("web-listen: %s", err);
            while (i-- > 0)
                close(fds[i]);
            return 1;
        }
    }
    if (!(a->web = webgroup_new(a->pws, n, fds, opt))) {
        log_error("web-listen: out of memory");
        return 1;
    }
    sock_addr_format(&opt->web_addr, s, sizeof s);
    log_info("web: WEB proxy (%s carrier) on http://%s/ for https://%s/, served by %d worker%s; "
             "only plain and dd secrets are WEB secrets: ee secrets get no capability",
             websess_mode_name((enum websess_mode)opt->web_carrier), s, opt->web_host, n,
             n == 1 ? "" : "s");
    return APP_ON;
}

/* The workers, set up (their threads start after detaching), and the metrics server. */
static int app_workers(struct app *a)
{
    const struct options *opt = &a->g->opt;
    a->nworkers = a->start.nworkers;
    a->ws = calloc((size_t)a->nworkers, sizeof *a->ws);
    a->pws = calloc((size_t)a->nworkers, sizeof *a->pws);
    if (!a->ws || !a->pws)
        return 1;
    for (int i = 0; i < a->nworkers; i++) {
        int rc = app_worker(a, i);
        if (rc != APP_ON)
            return rc;
    }
    for (int l = 0; l < opt->nlisten; l++) {
        char s[SOCK_ADDR_STRLEN];
        sock_addr_format(&opt->listen[l], s, sizeof s);
        log_info("listening on %s (%d worker%s)", s, a->nworkers, a->nworkers == 1 ? "" : "s");
    }
    if (opt->prefix_on) {
        char p[INET6_ADDRSTRLEN], msg[512];
        inet_ntop(AF_INET6, &opt->prefix, p, sizeof p);
        log_info("listen-prefix: every address of %s/%d port %d, one per user", p,
                 opt->prefix_len, opt->prefix_port);
        if (prefix_route_setup(opt, msg, sizeof msg))
            log_warn("%s", msg);
        else if (msg[0])
            log_info("%s", msg);
    }
    int rc = opt->web_on ? app_web(a) : APP_ON;
    if (rc == APP_ON && (opt->metrics_on || opt->api_on))
        rc = app_metrics(a);
    if (rc == APP_ON)
        log_acl(&a->g->acl);
    return rc;
}

/* The links shown, then daemonize, the pidfile and the switch to `user`. */
static int app_detach(struct app *a)
{
    const struct options *opt = &a->g->opt;
    print_links(opt, a->user.uid);
    if (opt->daemonize) {
        if (daemon(1, 0) != 0) {
            log_error("daemonize: %s", strerror(errno));
            return 1;
        }
        /* The loops (their epoll and eventfd descriptors) were made before the fork. */
        for (int i = 0; i < a->nworkers; i++)
            ev_loop_fork(a->ws[i].loop);
    }
    snprintf(a->pidfile, sizeof a->pidfile, "%s", opt->pidfile);
    if (a->pidfile[0] && write_pidfile(a->pidfile, a->user.uid))
        return 1;
    if (opt->user[0] && a->user.found)
        prefix_give_to(opt, a->user.uid);
    if (opt->user[0] && startup_drop_privileges(&a->user))
        return 1;
    return APP_ON;
}

/* The threads: worker 0's loop also learns the site's TLS profile. */
static int app_start(struct app *a)
{
    const struct options *opt = &a->g->opt;
    tlslearn_start(&a->learn, a->ws[0].loop);
    char lerr[400]; /* before the workers: every byte they count is flushed */
    a->lstore = lstore_start(&a->users, a->g, lerr, sizeof lerr);
    if (!a->lstore && lerr[0]) {
        log_error("%s", lerr);
        return 1;
    }
    for (uint32_t id = 0; id < users_count(&a->users); id++) { /* offline reset-quota */
        struct user_shared *us = users_shared(&a->users, id);
        if (us->reset_asked && a->lstore && lstore_reset_quota(a->lstore, users_name(&a->users, id)))
            log_warn("out of memory: the fleet's quota count of %s was not reset",
                     users_name(&a->users, id));
        a->resets_asked |= us->reset_asked;
        us->reset_asked = 0;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < a->nworkers; i++) {
        if (ncpu > 1) /* one CPU: spinning would only delay whoever sends the reply */
            worker_set_busy_poll(&a->ws[i], (unsigned)opt->busy_poll_us);
        int rc = worker_start(&a->ws[i]);
        if (rc) {
            log_error("cannot start worker %d: %s", i, strerror(rc));
            return 1;
        }
        a->nstarted++;
    }
    int mrc = a->msrv ? metrics_server_start(a->msrv) : 0;
    if (mrc) {
        log_error("cannot start the metrics server: %s", strerror(mrc));
        return 1;
    }
    statefile_note_pid(a->lock_fd);
    log_info("mtproxy %s started, pid %ld, %d user%s", MTPROXY_VERSION, (long)getpid(),
             opt->nsecrets, opt->nsecrets == 1 ? "" : "s");
    /* Listening and serving: a Type=notify unit's start (and what is ordered after it) ends here. */
    if (sd_notify_state("READY=1") < 0)
        log_warn("cannot tell the service manager we are ready (NOTIFY_SOCKET): %s", strerror(errno));
    /* What the state file holds now: it is rewritten only when that changes (after dropping
     * privileges, only a quota makes it change; see startup_check). */
    a->saver.users = &a->users;
    size_t last_cap = 0;
    users_state_format(&a->users, &a->saver.last, &last_cap);
    if (a->resets_asked) { /* the state file's quota-reset lines go with the next save */
        free(a->saver.last);
        a->saver.last = NULL;
    }
    return APP_ON;
}

/* SIGHUP: the log reopened; the new generation built (with middle mode's ME files) and handed
 * to the workers if it is good, or every error logged and the running one kept. */
static void app_reload(struct app *a)
{
    char err[512];
    if (log_reopen(err, sizeof err)) {
        /* Not to the rotated file only: an operator must see it where they look. */
        fprintf(stderr, "mtproxy: SIGHUP: %s\n", err);
        syslog(LOG_ERR, "mtproxy: SIGHUP: %s", err);
        log_error("SIGHUP: %s", err);
    } else {
        log_info("SIGHUP: log reopened");
    }
    struct gen *cur = a->g;
    memset(&a->errs, 0, sizeof a->errs);
    struct gen *g = reload_build(&a->rl, cur, &a->errs);
    if (!g) {
        int shown = a->errs.count < CONFIG_MAX_ERRORS ? a->errs.count : CONFIG_MAX_ERRORS;
        for (int i = 0; i < shown; i++)
            log_error("SIGHUP: %s", a->errs.msg[i]);
        log_error("SIGHUP: configuration rejected (%d error%s): the running one is kept",
                  a->errs.count, a->errs.count == 1 ? "" : "s");
        return;
    }
    if (a->rl.nrestart)
        log_warn("SIGHUP: %s changed: %s only after a restart (the running value stays)",
                 a->rl.restart_keys, a->rl.nrestart == 1 ? "it takes effect" : "they take effect");
    uint32_t removed = g->removed;
    log_set_level((enum log_level)g->opt.log_level);
    reload_commit(&a->rl, g);
    for (int i = 0; i < a->nworkers; i++)
        proxy_worker_post_gen(&a->pws[i], g);
    if (a->msrv)
        metrics_server_post_gen(a->msrv, g);
    lstore_post_gen(a->lstore, g);
    log_info("SIGHUP: configuration %llu loaded: %d user%s (%u removed: their connections are "
             "%s), %d dc line%s; live connections keep their settings",
             (unsigned long long)g->serial, g->opt.nsecrets, g->opt.nsecrets == 1 ? "" : "s",
             removed, g->opt.removed_user == REMOVED_DRAIN ? "drained" : "closed", g->opt.ndcs,
             g->opt.ndcs == 1 ? "" : "s");
    log_acl(&g->acl);
    gen_unref(cur);
    a->g = g;
    print_links(&g->opt, a->user.uid);
    statefile_save(&a->saver, g, 0);
    if (a->rl.me_err[0])
        log_error("SIGHUP: middle-proxy files not reloaded, keeping the current ones: %s",
                  a->rl.me_err);
    else if (g->me)
        log_info("SIGHUP: middle-proxy files reloaded: %d ME address%s", g->me->naddrs,
                 g->me->naddrs == 1 ? "" : "es");
}

static void app_reload_job(void *arg)
{
    app_reload(arg);
}

/* On the way out: an API change waiting for its reload (or about to raise SIGHUP for it) is
 * answered at once as refused (the API puts users-file back), since no reload runs any more;
 * else the API thread would wait out API_RELOAD_WAIT and the stop with it. */
static void api_reloads_close(struct api_reloads *rl)
{
    api_reload_end(rl, 0, "the proxy is stopping");
    atomic_store(&rl->done, ULONG_MAX / 2); /* past any reload a caller may wait for */
    api_state_saved(rl, 0);
    atomic_store(&rl->saved, ULONG_MAX / 2);
}

/* Until SIGTERM or SIGINT: SIGHUP reloads (in the reloader, at idle priority: the relays never
 * wait for a build), SIGUSR1 logs the counters, and every few seconds the quota used goes to
 * the state file; the generations the threads let go are freed (gen_reap). */
static int app_run(struct app *a)
{
    int rc = reloader_start(&a->reloader, app_reload_job, a, &a->reaper);
    if (rc)
        log_warn("reloads run at normal priority: no thread for them: %s", strerror(rc));
    for (;;) {
        struct timespec ts = {STATEFILE_SAVE_SECONDS, 0};
        int sig = sigtimedwait(&a->sigs, NULL, &ts);
        if (sig < 0) {
            gen_reap(&a->reaper); /* those let go since the last reload */
            statefile_save(&a->saver, a->g, 0);
        } else if (sig == SIGHUP) {
            struct gen *before = a->g;
            api_reload_begin(&a->api_rl);
            reloader_run(&a->reloader);
            api_reload_end(&a->api_rl, a->g != before, a->errs.count ? a->errs.msg[0] : NULL);
        } else if (sig == SIGUSR1) {
            log_stats(a->pws, a->ws, a->nworkers);
        } else if (sig == SIGUSR2) { /* the state file now (the API's reset-quota waits) */
            api_state_saved(&a->api_rl, statefile_save(&a->saver, a->g, 0) == 0);
        } else {
            log_info("%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            api_reloads_close(&a->api_rl);
            sd_notify_state("STOPPING=1");
            a->ran = 1;
            return 0;
        }
    }
}

/* After a run: the workers stopped and joined, the last counters and state written, the
 * pidfile removed. On every path: what the process holds freed (an early exit leaves workers
 * that were set up but never stopped to the exit). */
static void app_stop(struct app *a)
{
    reloader_stop(&a->reloader);
    if (a->ran) {
        metrics_server_stop(a->msrv); /* it reads the workers' counters */
        for (int i = 0; i < a->nworkers; i++)
            worker_request_stop(&a->ws[i]);
        for (int i = 0; i < a->nworkers; i++) {
            worker_join(&a->ws[i]);
            proxy_worker_destroy(&a->pws[i]);
        }
        lstore_stop(a->lstore); /* the last deltas, before the state file */
        a->lstore = NULL;
        log_stats(a->pws, a->ws, a->nworkers);
        statefile_save(&a->saver, a->g, 1);
        if (a->pidfile[0])
            remove_pidfile(a->pidfile);
        log_info("stopped");
    }
    if (a->ran || !a->nstarted) { /* no thread still uses them */
        metrics_server_free(a->msrv);
        webgroup_free(a->web);
        free(a->ws);
        free(a->pws);
        replay_free(a->replay);
        gen_unref(a->g);
        gen_reap(&a->reaper);
        users_destroy(&a->users);
    }
    free(a->saver.last);
    free(a->args);
    if (a->lock_fd >= 0)
        close(a->lock_fd);
    if (a->log_opened)
        log_close();
}

int main(int argc, char **argv)
{
    if (crypto_init()) {
        fprintf(stderr, "mtproxy: cannot initialise OpenSSL\n");
        return 1;
    }
    if (argc >= 2 && strcmp(argv[1], "generate-secret") == 0)
        return generate_secret(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "user") &&
        !(argc >= 3 && !strcmp(argv[2], "rotate-address")))
        return usercli_main(argc - 2, argv + 2); /* add, list, show, set, ... (usercli.h) */
    struct app *a = calloc(1, sizeof *a);
    if (!a)
        return 1;
    a->lock_fd = -1;
    /* The phases in order; each goes on (APP_ON) or ends the process with an exit code. */
    static int (*const phases[])(struct app *) = {
        app_configure, app_check, app_preflight, app_workers, app_detach, app_start, app_run,
    };
    int rc = app_args(a, argc, argv);
    for (size_t i = 0; rc == APP_ON && i < sizeof phases / sizeof phases[0]; i++)
        rc = phases[i](a);
    app_stop(a);
    free(a);
    return rc;
}
