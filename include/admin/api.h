/* api.h: the management API (api = ADDR:PORT): users listed, created, changed, disabled, rotated, deleted and their quota reset, through users-file and the reload path; also served in-process by `mtproxy user` with the proxy stopped. */
#ifndef MTPROXY_PROXY_API_H
#define MTPROXY_PROXY_API_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/sbuf.h"
#include "proto/http.h"

#define API_BODY_MAX (64u << 10) /* request body bytes */
#define API_RELOAD_WAIT 60.0     /* seconds an API change waits for its reload */
#define API_MAX_CONNS 16         /* API connections open at once; more wait in the backlog */
#define API_MAX_PER_SOURCE 4     /* ... from one address: a 5th replaces its oldest idle one */
#define API_IDLE_MIN 1.0         /* seconds a connection waits for its request before it counts
                                  * as idle (a busy or slow client sends it late, not never) */
/* seconds from accept for a whole request: an idle connection goes (a full API replaces its
 * oldest one still reading before that); a request that came while a reload held the thread
 * is still served */
#define API_HEADER_TIMEOUT 5.0

struct gen;

/*
 * How a change is applied: under one mutex (calls are serialised), the API reads users-file,
 * makes the change in its text, checks the new text with the parser the reload uses
 * (options_load_users: the same errors, as PATH:LINE) and writes it atomically
 * (fs_write_atomic: temporary file, fsync, rename, fsync of the directory; mode 0600). Then it
 * raises SIGHUP in its own process: the main thread reloads exactly as for an operator's
 * SIGHUP (one path, one log line, one generation). The API waits for the reload that started
 * after the file was written (struct api_reloads) and answers from the generation it made; a
 * reload that refused the new file (e.g. a name that the main config has too) puts the old
 * text back and answers the error. A failed write changes nothing.
 */
struct api_reloads {
    _Atomic unsigned long begun, done; /* reloads started and finished, main thread */
    _Atomic int ok;                    /* the last finished one was accepted */
    char err[CONFIG_ERR_LEN];          /* its first error (written before done moves) */
    /* state-file saves asked with SIGUSR2 (reset-quota answers once its zero is on disk) */
    _Atomic unsigned long saved; /* saves done, main thread */
    _Atomic int save_ok;         /* the last one wrote the file (or had nothing to write) */
};

/* The API's host (the metrics server's thread): the generation served now, after adopting
 * the newest one posted (so that a change answers from the generation it made). */
typedef struct gen *(*api_gen_fn)(void *arg);

struct api;

struct api *api_new(struct api_reloads *rl, api_gen_fn current, void *arg);

/* `mtproxy user` with the daemon stopped: the same calls, served in this process with no token
 * check; a change is applied by reload(arg) (which rebuilds the generation current() returns
 * from the changed users-file: 0, or -1 with err) instead of a SIGHUP; reset-quota also drops
 * the user's quota-used line from the state file. */
typedef int (*api_reload_fn)(void *arg, char *err, size_t errlen);
struct api *api_new_offline(api_gen_fn current, api_reload_fn reload, void *arg);
void api_free(struct api *a);

/* Serves one request (rq, its body[0..blen)) and writes the JSON answer to out. Blocks while
 * a change is written and reloaded (the metrics server calls it on a thread of its own, so
 * that scrapes go on). Returns the HTTP status. */
int api_serve(struct api *a, const struct http_request *rq, const char *body, size_t blen,
              struct sbuf *out);

/* Appends s as a JSON string (quoted, escaped) to o (o->failed on out of memory). */
void api_json_str(struct sbuf *o, const char *s);

/* main's side of struct api_reloads, around one reload (ok: it was accepted; err: else why). */
void api_reload_begin(struct api_reloads *rl);
void api_reload_end(struct api_reloads *rl, int ok, const char *err);
/* main's side of a state-file save asked by SIGUSR2 (ok: written, or nothing to write). */
void api_state_saved(struct api_reloads *rl, int ok);

#endif
