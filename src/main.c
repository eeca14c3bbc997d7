/* main.c: command line, config loading, start-up checks, workers, signals and shutdown. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/replay.h"
#include "core/sock.h"
#include "core/worker.h"
#include "crypto/crypto.h"
#include "proto/secret.h"
#include "proxy/conn.h"
#include "proxy/dc.h"
#include "proxy/fronting.h"
#include "proxy/options.h"
#include "proxy/tlslearn.h"

#define EXIT_CONFIG 2

static void usage(FILE *f)
{
    static char help[32768];
    config_help(options_table, options_count, help, sizeof help);
    fprintf(f,
            "mtproxy %s: an MTProto proxy for Telegram.\n\n"
            "Usage:\n"
            "  mtproxy [--config FILE] [--KEY VALUE ...]   run the proxy\n"
            "  mtproxy --check-config [--config FILE] [--KEY VALUE ...]\n"
            "                                            validate the configuration and exit\n"
            "  mtproxy generate-secret [--dd | --tls DOMAIN]\n"
            "                                            print a new random secret\n"
            "  mtproxy --help | --version\n\n"
            "Every config file key can be given as --KEY VALUE (the command line wins; a\n"
            "repeatable key given on the command line replaces the file's values).\n\n"
            "Keys:\n%s",
            MTPROXY_VERSION, help);
}

/* Draws a new 16-byte key. A plain secret is redrawn while its hex starts with dd or ee:
 * some clients (Telethon among them) read such a prefix as a secret kind. Returns 0 or -1. */
static int draw_key(struct secret *s)
{
    do {
        if (crypto_random(s->key, sizeof s->key))
            return -1;
    } while (s->kind == SECRET_PLAIN && (s->key[0] == 0xdd || s->key[0] == 0xee));
    return 0;
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
    if (draw_key(&s)) {
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

/* Secret from the state file, or a new one saved there. Returns 0, or -1 with err. */
static int ensure_secret(struct options *o, char *err, size_t errlen)
{
    if (o->nsecrets)
        return 0;
    int rc = options_load_state(o, o->state_file, err, errlen);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    struct secret s = {.kind = SECRET_PLAIN};
    snprintf(s.name, sizeof s.name, "default");
    if (draw_key(&s)) {
        snprintf(err, errlen, "no random source");
        return -1;
    }
    if (options_save_state(&s, o->state_file, err, errlen))
        return -1;
    o->secrets[o->nsecrets++] = s;
    log_info("no secret configured: generated one and saved it in %s", o->state_file);
    return 0;
}

/* Raises RLIMIT_NOFILE to its hard limit and lowers max-connections to fit it. */
static void fit_fd_limit(struct options *o, int nworkers)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* Two descriptors per connection (from accept on: while it handshakes, its worker holds
     * one in reserve for its upstream socket), plus per worker its listeners, epoll/eventfd,
     * the spare reserve descriptor for the next accept and splice pipes (two each), plus
     * slack. */
    long long reserve =
        (long long)nworkers * (o->nlisten + 4 + 1 + 2 * PROXY_PIPES_PER_WORKER) + 32;
    long long ids = 0; /* pooled DC sockets: per worker, per DC id */
    for (int i = 0; i < o->ndcs; i++)
        ids += i == 0 || o->dcs[i].id != o->dcs[i - 1].id;
    reserve += (long long)nworkers * o->dc_pool * (ids + (o->dc_builtin ? 6 : 0));
    long long fit = ((long long)rl.rlim_cur - reserve) / 2;
    if (rl.rlim_cur != RLIM_INFINITY && fit < o->max_connections) {
        if (fit < 1)
            fit = 1;
        log_warn("max-connections %d needs %lld file descriptors but RLIMIT_NOFILE is %llu: "
                 "using max-connections %lld",
                 o->max_connections, 2LL * o->max_connections + reserve,
                 (unsigned long long)rl.rlim_cur, fit);
        o->max_connections = (int)fit;
    }
}

/* The links carry the secrets, so they never go to the log (a journal or a shared log file is
 * read by more people than the config): to stdout when it is a terminal, and to links-file
 * (default: the state-file's path + ".links"), written 0600 like the state file. */
static void print_links(const struct options *o, uid_t owner)
{
    char host[256];
    if (o->public_host[0]) {
        snprintf(host, sizeof host, "%s", o->public_host);
    } else if (!sock_addr_is_any(&o->listen[0])) {
        sock_addr_host(&o->listen[0], host, sizeof host);
    } else if (gethostname(host, sizeof host) != 0) {
        snprintf(host, sizeof host, "localhost");
    }
    int port = o->public_port ? o->public_port : sock_addr_port(&o->listen[0]);
    int tty = !o->daemonize && isatty(STDOUT_FILENO);
    size_t cap = (size_t)o->nsecrets * 2200 + 1, n = 0;
    char *text = malloc(cap);
    if (!text)
        return;
    text[0] = 0;
    for (int i = 0; i < o->nsecrets; i++) {
        char tg[1024], https[1024];
        if (secret_links(&o->secrets[i], host, port, tg, sizeof tg, https, sizeof https))
            continue;
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

static int drop_privileges(const char *user)
{
    struct passwd *pw = getpwnam(user);
    if (!pw) {
        log_error("user '%s' does not exist", user);
        return -1;
    }
    if (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
        log_error("cannot switch to user '%s': %s", user, strerror(errno));
        return -1;
    }
    return 0;
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

static void log_stats(struct proxy_worker *pws, struct worker *ws, int n)
{
    struct proxy_stats s;
    memset(&s, 0, sizeof s);
    unsigned long long fd_limit = 0, pauses = 0, pool[4] = {0};
    for (int i = 0; i < n; i++) {
        proxy_stats_add(&s, &pws[i].stats);
        pool[0] += STAT_GET(&pws[i].dcpool.stats.connects);
        pool[1] += STAT_GET(&pws[i].dcpool.stats.claims);
        pool[2] += STAT_GET(&pws[i].dcpool.stats.dropped);
        pool[3] += STAT_GET(&pws[i].dcpool.stats.failures);
        fd_limit += STAT_GET(&ws[i].stats.accept_fd_limit);
        pauses += STAT_GET(&ws[i].stats.accept_pauses);
    }
    log_info("stats: accepted %llu active %llu handshakes %llu dc_connects %llu "
             "dc_connect_fails %llu bytes_up %llu bytes_down %llu reads %llu writes %llu "
             "spliced %llu pipe_full %llu block_waits %llu accept_fd_limit %llu accept_pauses %llu",
             (unsigned long long)s.accepted, (unsigned long long)s.active,
             (unsigned long long)s.handshakes, (unsigned long long)s.dc_connects,
             (unsigned long long)s.dc_connect_fails, (unsigned long long)s.bytes_up,
             (unsigned long long)s.bytes_down, (unsigned long long)s.reads,
             (unsigned long long)s.writes, (unsigned long long)s.spliced,
             (unsigned long long)s.pipe_full, (unsigned long long)s.block_waits, fd_limit, pauses);
    log_info("stats: tls_handshakes %llu rejected %llu masked %llu replays %llu tls_hmacs %llu "
             "strangers_refused %llu hello_budget %llu unknown_sni %llu",
             (unsigned long long)s.tls_handshakes, (unsigned long long)s.rejected,
             (unsigned long long)s.masked, (unsigned long long)s.replays,
             (unsigned long long)s.tls_hmacs, (unsigned long long)s.strangers_refused,
             (unsigned long long)s.hello_budget, (unsigned long long)s.unknown_sni);
    if (n > 0 && pws[0].learn && pws[0].tls_enabled && pws[0].opt->tls_profile) {
        char prof[320];
        tlsprofile_describe(tlslearn_current(pws[0].learn), (int64_t)time(NULL), prof,
                            sizeof prof);
        log_info("stats: tls profile in use: %s", prof);
    }
    log_info("stats: acl_denied %llu acl_not_allowed %llu pp_untrusted %llu pp_bad %llu "
             "pp_local %llu socks_fails %llu store_replays %llu store_failed %llu",
             (unsigned long long)s.acl_denied, (unsigned long long)s.acl_not_allowed,
             (unsigned long long)s.pp_untrusted, (unsigned long long)s.pp_bad,
             (unsigned long long)s.pp_local, (unsigned long long)s.socks_fails,
             (unsigned long long)s.store_replays, (unsigned long long)s.store_failed);
    char line[1024];
    size_t len = 0;
    for (int r = 0; r < CR_COUNT; r++)
        len += (size_t)snprintf(line + len, sizeof line - len, " %s %llu", conn_reason_name(r),
                                (unsigned long long)s.closed[r]);
    log_info("stats: closed:%s", line);
    log_info("stats: dc_pool connects %llu claims %llu dropped %llu failures %llu", pool[0],
             pool[1], pool[2], pool[3]);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "generate-secret") == 0)
        return generate_secret(argc - 2, argv + 2);

    const char *config_path = NULL;
    int check_only = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    if (!rest)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("mtproxy %s\n", MTPROXY_VERSION);
            return 0;
        } else if (!strcmp(argv[i], "--check-config")) {
            check_only = 1;
        } else if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mtproxy: --config needs a file\n");
                return EXIT_CONFIG;
            }
            config_path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            config_path = argv[i] + 9;
        } else {
            rest[nrest++] = argv[i];
        }
    }

    static struct options opt;
    static struct config_parser parser;
    options_init(&parser, &opt);
    if (config_path)
        config_load_file(&parser, config_path);
    config_load_args(&parser, nrest, rest);
    free(rest);
    options_validate(&parser, &opt);
    /* The access list's files are read here, so --check-config reports their bad lines. */
    static struct acl acl;
    acl_build(&acl, &opt, &parser.errors);
    {
        char serr[CONFIG_ERR_LEN];
        if (!parser.errors.count && (options_resolve_socks5(&opt, serr, sizeof serr) ||
                                     rstore_resolve(&opt.rstore, serr, sizeof serr))) {
            snprintf(parser.errors.msg[0], CONFIG_ERR_LEN, "%s", serr);
            parser.errors.count = 1;
        }
    }
    if (parser.errors.count) {
        int shown = parser.errors.count < CONFIG_MAX_ERRORS ? parser.errors.count
                                                            : CONFIG_MAX_ERRORS;
        for (int i = 0; i < shown; i++)
            fprintf(stderr, "%s\n", parser.errors.msg[i]);
        if (parser.errors.count > shown)
            fprintf(stderr, "... and %d more errors\n", parser.errors.count - shown);
        fprintf(stderr, "mtproxy: %d configuration error%s\n", parser.errors.count,
                parser.errors.count == 1 ? "" : "s");
        return EXIT_CONFIG;
    }
    if (check_only) {
        /* Also the start-time check that needs names resolved: fronting must not loop. */
        static struct mask_table check_masks;
        char merr[512];
        if (mask_table_build(&check_masks, &opt, merr, sizeof merr)) {
            fprintf(stderr, "%s\nmtproxy: 1 configuration error\n", merr);
            return EXIT_CONFIG;
        }
        printf("configuration OK (%d listen address%s, %d secret%s, %d dc line%s, %zu "
               "access-list range%s)\n",
               opt.nlisten, opt.nlisten == 1 ? "" : "es", opt.nsecrets,
               opt.nsecrets == 1 ? "" : "s", opt.ndcs, opt.ndcs == 1 ? "" : "s",
               cidr_set_count(&acl.allow) + cidr_set_count(&acl.deny),
               cidr_set_count(&acl.allow) + cidr_set_count(&acl.deny) == 1 ? "" : "s");
        return 0;
    }

    /* Block the signals main waits for before anything is bound, so a SIGTERM that arrives
     * during start-up is taken by sigwait (clean exit 0), not by the default action; the
     * workers inherit the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    if (log_open(opt.log, (enum log_level)opt.log_level, err, sizeof err)) {
        fprintf(stderr, "mtproxy: %s\n", err);
        return EXIT_CONFIG;
    }
    if (ensure_secret(&opt, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_CONFIG;
    }
    int nworkers = opt.workers;
    if (nworkers <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nworkers = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
    }
    fit_fd_limit(&opt, nworkers);

    static struct dc_table dcs;
    dc_table_build(&dcs, &opt);
    static struct mask_table masks;
    if (mask_table_build(&masks, &opt, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_CONFIG;
    }
    struct replay *replay = NULL;
    if (opt.replay_cache) {
        /* The window covers a hello stamped at the edge of the future skew until it falls
         * off the past skew; with tls-ignore-time the cache is FIFO only. */
        struct replay_config rc = {.window = opt.tls_ignore_time ? 0
                                                                 : 2 * (opt.tls_time_skew_ms / 1000)};
        rc.max_entries = opt.replay_cache / 36 + 1;
        while (rc.max_entries > 1 && replay_memory_for(&rc) > opt.replay_cache)
            rc.max_entries -= rc.max_entries / 16 + 1;
        if (!(replay = replay_new(&rc))) {
            log_error("cannot allocate the replay cache (%zu bytes)", opt.replay_cache);
            return 1;
        }
        log_info("replay cache: %zu entries, %zu bytes, window %u s", rc.max_entries,
                 replay_memory_for(&rc), rc.window);
    }

    static struct tlslearn learn;
    if (tlslearn_init(&learn, &opt, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_CONFIG;
    }
    struct worker *ws = calloc((size_t)nworkers, sizeof *ws);
    struct proxy_worker *pws = calloc((size_t)nworkers, sizeof *pws);
    if (!ws || !pws)
        return 1;
    for (int i = 0; i < nworkers; i++) {
        if (worker_init(&ws[i], i, NULL, NULL, NULL, NULL) ||
            proxy_worker_init(&pws[i], &ws[i], &opt, &dcs, &masks, replay, nworkers)) {
            log_error("cannot set up worker %d", i);
            return 1;
        }
        pws[i].acl = &acl;
        pws[i].learn = &learn;
        for (int l = 0; l < opt.nlisten; l++) {
            int fd = sock_listen(&opt.listen[l], opt.backlog, 1, &pws[i].sockopts, err,
                                 sizeof err);
            if (fd < 0) {
                log_error("%s", err);
                return 1;
            }
            int mss = opt.client_mss;
            if (mss && setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss) != 0) {
                log_error("client-mss %d: %s", mss, strerror(errno));
                return 1;
            }
            worker_add_listener(&ws[i], fd);
        }
    }
    for (int l = 0; l < opt.nlisten; l++) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&opt.listen[l], a, sizeof a);
        log_info("listening on %s (%d worker%s)", a, nworkers, nworkers == 1 ? "" : "s");
    }
    if (acl_active(&acl))
        log_info("access list: %zu allow and %zu deny ranges (%zu bytes)%s",
                 cidr_set_count(&acl.allow), cidr_set_count(&acl.deny),
                 cidr_set_memory(&acl.allow) + cidr_set_memory(&acl.deny),
                 acl.has_allow ? ": only allowed sources are served" : "");
    uid_t run_uid = (uid_t)-1;
    if (opt.user[0]) {
        struct passwd *upw = getpwnam(opt.user);
        if (!upw) {
            log_error("user '%s' does not exist", opt.user);
            return EXIT_CONFIG;
        }
        run_uid = upw->pw_uid;
    }
    print_links(&opt, run_uid);

    if (opt.daemonize) {
        if (daemon(1, 0) != 0) {
            log_error("daemonize: %s", strerror(errno));
            return 1;
        }
        /* The loops (their epoll and eventfd descriptors) were made before the fork. */
        for (int i = 0; i < nworkers; i++)
            ev_loop_fork(ws[i].loop);
    }
    if (opt.pidfile[0] && write_pidfile(opt.pidfile, run_uid))
        return 1;
    if (opt.user[0] && drop_privileges(opt.user))
        return 1;


    tlslearn_start(&learn, ws[0].loop); /* worker 0's loop learns the site's TLS profile */
    for (int i = 0; i < nworkers; i++) {
        int rc = worker_start(&ws[i]);
        if (rc) {
            log_error("cannot start worker %d: %s", i, strerror(rc));
            return 1;
        }
    }
    log_info("mtproxy %s started, pid %ld", MTPROXY_VERSION, (long)getpid());

    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            log_reopen();
            log_info("SIGHUP: log reopened");
        } else if (sig == SIGUSR1) {
            log_stats(pws, ws, nworkers);
        } else {
            log_info("%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            break;
        }
    }
    for (int i = 0; i < nworkers; i++)
        worker_request_stop(&ws[i]);
    for (int i = 0; i < nworkers; i++) {
        worker_join(&ws[i]);
        proxy_worker_destroy(&pws[i]);
    }
    log_stats(pws, ws, nworkers);
    if (opt.pidfile[0])
        remove_pidfile(opt.pidfile);
    log_info("stopped");
    free(ws);
    free(pws);
    replay_free(replay);
    acl_free(&acl);
    log_close();
    return 0;
}
