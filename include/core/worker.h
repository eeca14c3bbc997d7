/* worker.h: one thread, one libev loop, its own SO_REUSEPORT listeners; knows no protocol. */
#ifndef MTPROXY_CORE_WORKER_H
#define MTPROXY_CORE_WORKER_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/sock.h"
#include "core/stat.h"

struct worker;

/* Called for every accepted socket (nonblocking, close-on-exec). The handler owns fd, and
 * must call worker_reserve_release once for it (see there). */
typedef void (*worker_accept_fn)(struct worker *w, int fd, const struct sock_addr *peer);

/* Called in the worker thread when the worker is asked to stop: close everything, then
 * return; the loop ends once no watcher is left active or after the call. */
typedef void (*worker_stop_fn)(struct worker *w);

/* Called in the worker thread when main posts a command (worker_post). */
typedef void (*worker_cmd_fn)(struct worker *w, int cmd);

struct worker_listener {
    struct worker *w;
    int fd;
    int tag; /* the owner's mark (worker_add_listener_tag), 0 by default */
    ev_io io;
};

#define WORKER_MAX_LISTENERS 16

/* Counters owned by the worker thread; others read them relaxed (for stats). */
struct worker_stats {
    stat_t accepted;
    stat_t accept_errors;     /* other than EAGAIN/EINTR/ECONNABORTED */
    stat_t accept_fd_limit;   /* EMFILE / ENFILE hits (at accept or its reserve) */
    stat_t accept_pauses;     /* times accepting paused because the owner said full */
    stat_t busy_hits;         /* busy-poll: events came while spinning (a sleep saved) */
    stat_t busy_misses;       /* busy-poll: nothing came; the worker went to sleep */
};

struct worker {
    int id;
    struct ev_loop *loop;
    pthread_t thread;
    int started;
    struct worker_listener listeners[WORKER_MAX_LISTENERS];
    int nlisteners;
    int paused;           /* listeners stopped because the owner is full */
    ev_timer fd_retry;    /* listeners stopped after EMFILE/ENFILE; retried on this timer */
    ev_tstamp last_fd_warn;
    /* The descriptor reserve (/dev/null descriptors): one per accepted socket whose owner has
     * not called worker_reserve_release yet (owed), plus a spare for the next accept. */
    int *reserve;
    int nreserve, reserve_cap, reserve_owed;
    ev_async wake;
    _Atomic int stop_requested;
    _Atomic int cmd_pending;
    worker_accept_fn on_accept;
    worker_stop_fn on_stop;
    worker_cmd_fn on_cmd;
    void *ctx; /* the owner's per-worker state */
    int accept_tag; /* during on_accept: the tag of the listener the socket came from */
    struct worker_stats stats;
    unsigned busy_poll_us; /* after the loop ran callbacks, spin this long before sleeping */
    int ended;             /* the loop was told to end (on_wake) */
    unsigned long passes;  /* busy poll: loop passes that ran callbacks */
};

/* Relaxed increment by the owning thread (a plain add, no lock prefix). */
#define WORKER_STAT_INC(p) STAT_INC(p)

/* Sets up a worker with a fresh libev loop and its first reserve descriptor. Returns 0, or
 * -1. */
int worker_init(struct worker *w, int id, worker_accept_fn on_accept, worker_stop_fn on_stop,
                worker_cmd_fn on_cmd, void *ctx);

/* Adds a listening socket (created by main before privileges are dropped). The worker
 * owns it from now on. Returns 0, or -1 if too many. */
int worker_add_listener(struct worker *w, int fd);

/* The same, with a tag the accept handler finds in w->accept_tag for this listener's
 * sockets. */
int worker_add_listener_tag(struct worker *w, int fd, int tag);

/* Starts the thread running the loop. Returns 0, or an errno value. */
int worker_start(struct worker *w);

/* Busy poll: after a pass that ran callbacks, the worker keeps polling its loop without
 * blocking (epoll_wait with a zero timeout) until us microseconds pass with nothing to do, and
 * only then sleeps, so an answer arriving soon after is handled without the wake-up of a
 * halted CPU (the non-blocking passes run due timers too). 0 = off. Call before start. */
void worker_set_busy_poll(struct worker *w, unsigned us);

/* The calling thread takes the smallest share of a CPU, so that relays always win: SCHED_IDLE
 * (a relay thread that wakes preempts it at once, and it never preempts one), and nice 19, the
 * next best (it still runs out a slice of ~1 ms before a waking thread gets the CPU), in case
 * SCHED_IDLE is refused. Both are the thread's own on Linux and stay for its life (an
 * unprivileged thread may not come back from them); threads it creates later inherit them. A
 * refusal (a container) is only logged at debug level, under who's name. */
void worker_thread_idle(const char *who);

/* Runs the loop in the calling thread until stopped (for tests and single-thread mode). */
void worker_run(struct worker *w);

/* From any thread: asks the worker to stop (on_stop runs in the worker thread). */
void worker_request_stop(struct worker *w);

/* From any thread: posts a small command (bit mask) handled by on_cmd in the worker. */
void worker_post(struct worker *w, int cmd);

/* Waits for the thread to end and frees the loop and listeners. */
void worker_join(struct worker *w);

/* In the worker thread: out of descriptors or memory (err): stop accepting for a short
 * while (new clients wait in the backlog), then retry. */
void worker_backoff_accept(struct worker *w, int err);

/* In the worker thread: the accept handler no longer needs the descriptor the worker kept in
 * reserve for one accepted socket (it opened its second socket, will never open one, or
 * closed). Call it just before opening that socket, so the socket gets the descriptor even
 * when the process is at RLIMIT_NOFILE: the worker accepts only while it holds one reserve
 * descriptor per accepted socket not yet released, plus one. Once per accepted socket. */
void worker_reserve_release(struct worker *w);

/* In the worker thread: a socket that did not come from a listener (an in-process stream's
 * end) is about to be handed to the accept handler: holds a reserve descriptor for it as an
 * accept does, which the handler gives back with worker_reserve_release. Returns 0, or -1
 * (out of descriptors or memory: hand nothing over). */
int worker_reserve_hold(struct worker *w);

/* In the worker thread: out of descriptors for a socket that was accepted (another worker
 * took the one released for it): closes the spare reserve descriptor, if there is one, so a
 * retry may succeed; accepting then waits until the spare is back. Returns 0 if it closed
 * one, -1 if there was none. */
int worker_reserve_spend(struct worker *w);

/* In the worker thread: stop / resume accepting because the owner is full. */
void worker_pause_accept(struct worker *w);
void worker_resume_accept(struct worker *w);

#endif
