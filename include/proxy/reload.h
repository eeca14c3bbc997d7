/* reload.h: config generations: one path builds, validates and hands out the config, at start and on SIGHUP. */
#ifndef MTPROXY_PROXY_RELOAD_H
#define MTPROXY_PROXY_RELOAD_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/config.h"
#include "proxy/acl.h"
#include "proxy/dc.h"
#include "proxy/fronting.h"
#include "proxy/options.h"
#include "proto/faketls.h"
#include "proxy/users.h"

/*
 * A generation is everything the workers take from the config: the options and the tables
 * derived from them (users and their limits, DC table, fronting targets, access list with its
 * files read), plus whatever reload hooks add. It is built and checked whole on the main
 * thread (reload_build); if anything is wrong it is thrown away with every error logged as
 * file:line and the running generation stays. A good one is handed to every worker
 * (proxy_worker_post_gen, through worker_post): new connections use it, a live connection
 * keeps the generation it started with (it holds a reference) until it ends, except that the
 * connections of a user the new generation no longer has are closed. The last reference
 * frees a generation (in whichever thread drops it).
 *
 * Hooks: a module with its own reloadable state (middle-proxy's proxy-config, a TLS profile)
 * registers a struct reload_hook once at start with reload_hook_add; on every build its
 * build() runs after the core tables (it can fail the whole generation), its adopt() runs on
 * each worker thread when that worker switches, its free() when the generation goes.
 */

#define RELOAD_MAX_HOOKS 8

struct proxy_worker;
struct reload;

struct gen {
    _Atomic int refs;
    uint64_t serial;                /* 1 at start, +1 per accepted reload */
    struct options opt;
    struct dc_table dcs;
    struct mask_table masks;
    struct acl acl;
    struct users *users;            /* the process's registry (not owned) */
    uint32_t *uid;                  /* per secret index: its user's id */
    const struct user_limit **lim;  /* per secret index: its limit line, or NULL */
    uint8_t *live;                  /* per user id < nusers: 1 if the user is configured here */
    struct faketls_sni_index sni;   /* the ee secrets by domain (tls-sni-check) */
    uint32_t nusers;
    int state_secret;               /* the secret is the generated one from state-file */
    const struct reload *r;
    void *hook_data[RELOAD_MAX_HOOKS];
};

struct reload_hook {
    const char *name;
    /* Main thread. Builds this module's part of g (from g->opt) into *data. old is the
     * running generation (NULL at start). Adds errors to e (as "file:line: message" where a
     * line is known). Returns 0, or -1 to reject the generation. */
    int (*build)(struct gen *g, const struct gen *old, void **data, struct config_errors *e);
    /* Worker thread, when that worker switches from old (NULL at start) to g. May be NULL. */
    void (*adopt)(struct proxy_worker *pw, struct gen *g, void *data, const struct gen *old);
    /* Any thread, when g is freed (also when a build failed after build() succeeded). */
    void (*free)(void *data);
};

/* The reload state main owns: where the config comes from, the hooks, the user registry. */
struct reload {
    const struct reload_hook *hooks[RELOAD_MAX_HOOKS];
    int nhooks;
    struct users *users;
    const char *config_path; /* NULL: command line only */
    int argc;
    char **argv;             /* `--key value` arguments; they override the file on reload too */
    uint64_t serial;
};

void reload_init(struct reload *r, struct users *users, const char *config_path, int argc,
                 char **argv);

/* Registers a hook (before the first reload_build). Returns its slot in gen.hook_data, or -1
 * if RELOAD_MAX_HOOKS are registered. */
int reload_hook_add(struct reload *r, const struct reload_hook *h);

/* Reads the config file and arguments again and builds a generation: options validated,
 * socks5/replay-store resolved, access list (files reread), fronting targets, DC table, then
 * the hooks; with no secret configured, the one in state-file is used (read only). Users are
 * mapped (gen_map_users) unless the build found no secret. Every error goes to errs. Returns
 * the generation (one reference, serial not yet assigned: see reload_commit), or NULL. */
struct gen *reload_build(struct reload *r, const struct gen *old, struct config_errors *errs);

/* Gives g the next serial (call once g is accepted). */
void reload_commit(struct reload *r, struct gen *g);

/* Maps g's secrets to user ids (new names get new ids) and their limit lines. Main thread.
 * Returns 0, or -1 (out of memory / too many users). */
int gen_map_users(struct gen *g);

void gen_ref(struct gen *g);
/* Drops a reference; the last one frees g (hooks' free, tables, options). */
void gen_unref(struct gen *g);

/* Writes the keys whose change needs a restart (listen, workers, user, ...) that differ
 * between old and g, comma-separated, into out, and puts old's values back into g (they
 * stay in force until a restart). Returns how many. */
int reload_restart_keys(const struct gen *old, struct gen *g, char *out, size_t outlen);

/* Number of users in old that g no longer has. */
uint32_t reload_removed_users(const struct gen *old, const struct gen *g);

#endif
