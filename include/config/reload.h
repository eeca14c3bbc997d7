/* reload.h: config generations: one path builds, validates and hands out the config, at start and on SIGHUP. */
#ifndef MTPROXY_PROXY_RELOAD_H
#define MTPROXY_PROXY_RELOAD_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/config.h"
#include "users/acl.h"
#include "upstream/dc.h"
#include "upstream/fronting.h"
#include "config/options.h"
#include "config/preflight.h"
#include "proto/faketls.h"
#include "users/users.h"

/*
 * A generation is everything the workers take from the config: the options and the tables
 * derived from them (users and their limits, DC table, fronting targets, access list with its
 * files read, in middle mode the ME table). It is built and checked whole (reload_build: in
 * main at start, in the reloader thread on SIGHUP); if anything is wrong it is thrown away
 * with every error logged as file:line and the running generation stays. Once built it is
 * never changed. A good one is handed to every worker (proxy_worker_post_gen): new
 * connections use it, a live
 * connection keeps the generation it started with (it holds a reference) until it ends,
 * except that the connections of a user the new generation no longer has are closed (at once,
 * or with removed-user = drain once drain-timeout has passed: gen_user_fate). A worker
 * that adopts a generation with another ME table starts links to it (middle_adopt). The last
 * reference frees a generation: in the thread that drops it, or, for a generation built with
 * a reaper (the proxy's), in the next gen_reap (main's state-file tick, the reloader's next
 * job), so that a worker never spends its loop freeing a generation, nor waits on the lock of
 * the allocator arena it was built in.
 *
 * What a reload costs the relay is kept small this way: the build runs in the reloader thread
 * at idle priority (struct reloader); a worker's adoption is O(1) but for a walk over its live
 * connections when the generation removed users (or drains are under way), and only a
 * generation that removed users wakes it (proxy_worker_post_gen); the old generation goes back
 * to the reaper.
 */

struct me_table;
struct prefix_map;
struct gen;

/* Generations whose last reference was dropped, to be freed by main or the reloader (a
 * lock-free stack). */
struct gen_reaper {
    struct gen *_Atomic head;
};

struct gen {
    _Atomic int refs;
    uint64_t serial;                /* 1 at start, +1 per accepted reload */
    struct options opt;
    struct dc_table dcs;
    struct mask_table masks;
    struct acl acl;
    struct me_table *me;            /* middle mode: the MEs and proxy secret (one reference;
                                     * the previous generation's when its files did not load
                                     * on a reload); NULL in direct mode */
    struct users *users;            /* the process's registry (not owned) */
    uint32_t *uid;                  /* per secret index: its user's id */
    const struct user_limit **lim;  /* per secret index: its limit line, or NULL */
    uint8_t *live;                  /* per user id < nusers: 1 if the user is configured here */
    struct faketls_sni_index sni;   /* the ee secrets by domain (tls-sni-check) */
    uint32_t nusers;
    int state_secret;               /* the secret is the generated one from state-file */
    struct prefix_map *pmap;        /* listen-prefix: address -> user (proxy/prefix.h), or NULL */
    uint32_t removed;               /* users the running generation had and this one has not
                                     * (reload_removed_users; 0 for the first) */
    int has_ee;                     /* a secret is an ee (FakeTLS) one */
    struct gen_reaper *reaper;      /* the last reference goes there (NULL: freed at once) */
    struct gen *reap_next;          /* on the reaper's stack */
};

/* Start-up's part of the first build (reload_build with reload.start set and no old
 * generation), folded in before the generation is checked: the worker count; with no secret
 * configured the one in state-file (read only), or a new one drawn; max-connections lowered to
 * the file-descriptor limit; the users registry set up (reload.users, quota used read from
 * state-file). What it decided, for main to act on (save the drawn secret, raise the soft
 * limit, say what was lowered): */
struct reload_start {
    int nworkers;
    int secret_drawn;          /* the secret is new: main saves it in state-file */
    int max_connections;       /* as configured (the generation holds the fitted value) */
    struct preflight_fds fds;  /* the budget of the configured max-connections */
};

/* The reload state main owns: where the config comes from, the user registry. */
struct reload {
    struct users *users;
    const char *config_path; /* NULL: command line only */
    int argc;
    char **argv;             /* `--key value` arguments; they override the file on reload too */
    uint64_t serial;
    struct reload_start *start; /* set for the proxy's first build (see struct reload_start) */
    int tool;                /* links, doctor: ME files that do not load leave g->me NULL */
    int no_resolve;          /* mtproxy user: no name is resolved (socks5, replay-store,
                              * fronting targets): it needs none, and a resolver with no
                              * answer (no DNS) would hold every command */
    char me_err[CONFIG_ERR_LEN]; /* the last build's ME files did not load (reload, tool):
                                  * why ("" if they did or are not used) */
    struct gen_reaper *reaper; /* NULL, or where the generations it builds are freed */
    int nrestart;            /* the last reload's changed keys that need a restart: how many, */
    char restart_keys[512];  /* and their names (reload_restart_keys) */
    /* lock_wait_ms > 0: the next build takes STATE-FILE.lock, if that file exists (a start
     * that fails must leave none), before it reads users-file (statefile_lock_wait: a
     * `mtproxy user` change made with the proxy stopped is waited for, lock_poll as there)
     * into lock_fd (-1 none yet or no lock file, -2 held) */
    int lock_wait_ms, lock_fd;
    int (*lock_poll)(void *);
    void *lock_arg;
};

void reload_init(struct reload *r, struct users *users, const char *config_path, int argc,
                 char **argv);

/* Reads the config file and arguments again and builds a generation: options validated,
 * socks5/replay-store resolved, access list (files reread), fronting targets, DC table, in
 * middle mode (the running one's on a reload: ad-tag needs a restart) the ME table from its
 * files, then start-up's part (r->start). On a reload, a generated secret stays, and ME files
 * that do not load keep old's table (why: r->me_err), and keys that need a restart keep old's
 * values (r->nrestart, r->restart_keys); at start ME files that do not load are an error. Users are
 * mapped (gen_map_users) unless the build found no secret or r has no registry; g->removed
 * counts old's users g no longer has, g->has_ee says if a secret is ee. Every error
 * goes to errs. Returns the generation (one reference, serial not yet assigned: see
 * reload_commit), or NULL. */
struct gen *reload_build(struct reload *r, const struct gen *old, struct config_errors *errs);

/* Gives g the next serial (call once g is accepted). */
void reload_commit(struct reload *r, struct gen *g);

/* The thread main's reloads run in, at idle priority (worker_thread_idle), so that a reload's
 * build, its links-file and state-file never take a CPU from a relay; main itself stays at
 * normal priority (signals, the state-file tick, the stop). One job at a time: main hands it
 * one and waits for its end, so what main owns needs no lock. */
struct reloader {
    pthread_t thread;
    sem_t go, done;
    int started;
    int stop;                  /* written before go is posted */
    void (*fn)(void *arg);
    void *arg;
    struct gen_reaper *reaper; /* emptied before each job (NULL: none) */
};

/* Starts the thread that will run fn(arg) for each reloader_run. Returns 0, or an errno value
 * (then reloader_run runs fn in the caller). */
int reloader_start(struct reloader *rd, void (*fn)(void *), void *arg, struct gen_reaper *reaper);

/* Runs one job (fn(arg), after freeing the reaper's generations) in the thread and waits for
 * its end; without a thread, in the caller. */
void reloader_run(struct reloader *rd);

/* Ends and joins the thread (if it was started). */
void reloader_stop(struct reloader *rd);

/* Maps g's secrets to user ids (new names get new ids) and their limit lines. The thread that
 * builds (main at start, the reloader on SIGHUP; one at a time).
 * Returns 0, or -1 (out of memory / too many users). */
int gen_map_users(struct gen *g);

void gen_ref(struct gen *g);
/* Drops a reference; the last one frees g (tables, ME table reference, options), or with a
 * reaper (g->reaper) puts it on the reaper's stack (any thread; lock-free). */
void gen_unref(struct gen *g);

/* Main or the reloader (never both at once): frees the generations on r's stack. Returns how
 * many. */
int gen_reap(struct gen_reaper *r);

/* Writes the keys whose change needs a restart (listen, workers, user, ...) that differ
 * between old and g, comma-separated, into out, and puts old's values back into g (they
 * stay in force until a restart). Returns how many. */
int reload_restart_keys(const struct gen *old, struct gen *g, char *out, size_t outlen);

/* Number of users in old that g no longer has. */
uint32_t reload_removed_users(const struct gen *old, const struct gen *g);

/* What adopting generation g does to a live connection of user uid (-1: not admitted yet),
 * draining until *drain_at (0: not draining), at time now (seconds):
 *   GEN_KEEP   the user is in g (or uid is -1): it goes on, a drain stops (*drain_at = 0);
 *   GEN_CLOSE  g no longer has the user and says removed-user = close: close it now;
 *   GEN_DRAIN  g no longer has the user and says removed-user = drain: it goes on until
 *              *drain_at, set to now + drain-timeout unless it was draining already (a later
 *              reload never extends a drain). */
enum gen_fate { GEN_KEEP = 0, GEN_DRAIN, GEN_CLOSE };
enum gen_fate gen_user_fate(const struct gen *g, int32_t uid, double now, double *drain_at);

#endif
