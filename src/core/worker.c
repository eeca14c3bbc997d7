/* worker.c: a reactor thread: libev loop, accept loop with back-off, cross-thread wakeups. */
#include "core/worker.h"

#include <errno.h>
#include <time.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/log.h"

#define WORKER_ACCEPT_BATCH 64
#define WORKER_FD_RETRY_S 0.25

static void listeners_set(struct worker *w, int on)
{
    for (int i = 0; i < w->nlisteners; i++) {
        if (on)
            ev_io_start(w->loop, &w->listeners[i].io);
        else
            ev_io_stop(w->loop, &w->listeners[i].io);
    }
}

static int accepting(const struct worker *w)
{
    return !w->paused && !ev_is_active(&w->fd_retry) &&
           !atomic_load_explicit(&w->stop_requested, memory_order_relaxed);
}

/* Makes sure the reserve holds a descriptor for the next accepted socket. Returns 0, or -1
 * (errno set) when none can be had: the process is out of descriptors (or memory). */
static int reserve_fill(struct worker *w)
{
    if (w->nreserve > w->reserve_owed)
        return 0;
    if (w->nreserve == w->reserve_cap) {
        int cap = w->reserve_cap ? 2 * w->reserve_cap : 16;
        int *r = realloc(w->reserve, (size_t)cap * sizeof *r);
        if (!r) {
            errno = ENOMEM;
            return -1;
        }
        w->reserve = r;
        w->reserve_cap = cap;
    }
    /* A dup needs no path lookup (and no /dev after start). */
    int fd = w->nreserve ? fcntl(w->reserve[0], F_DUPFD_CLOEXEC, 0)
                         : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    w->reserve[w->nreserve++] = fd;
    return 0;
}

static void on_listen(struct ev_loop *loop, ev_io *io, int revents)
{
    struct worker_listener *l = io->data;
    struct worker *w = l->w;
    for (int i = 0; i < WORKER_ACCEPT_BATCH && accepting(w); i++) {
        /* Accept only a client whose second socket (its DC) can be opened: a batch of
         * accepts would otherwise take every free descriptor and leave those clients none. */
        if (reserve_fill(w)) {
            WORKER_STAT_INC(&w->stats.accept_fd_limit);
            worker_backoff_accept(w, errno);
            return;
        }
        struct sock_addr peer;
        peer.len = sizeof peer.u;
        int fd = accept4(l->fd, &peer.u.sa, &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            WORKER_STAT_INC(&w->stats.accepted);
            w->reserve_owed++;
            w->accept_tag = l->tag;
            w->on_accept(w, fd, &peer);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            WORKER_STAT_INC(&w->stats.accept_fd_limit);
            worker_backoff_accept(w, errno);
            return;
        }
        WORKER_STAT_INC(&w->stats.accept_errors);
        log_warn("worker %d: accept: %s", w->id, strerror(errno));
        return;
    }
}

static void on_fd_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct worker *w = t->data;
    if (!w->paused && !atomic_load(&w->stop_requested))
        listeners_set(w, 1);
}

static void on_wake(struct ev_loop *loop, ev_async *a, int revents)
{
    struct worker *w = a->data;
    int cmd = atomic_exchange(&w->cmd_pending, 0);
    if (cmd && w->on_cmd)
        w->on_cmd(w, cmd);
    if (atomic_load(&w->stop_requested)) {
        listeners_set(w, 0);
        ev_timer_stop(loop, &w->fd_retry);
        if (w->on_stop)
            w->on_stop(w);
        ev_async_stop(loop, &w->wake);
        w->ended = 1;
        ev_break(loop, EVBREAK_ALL);
    }
}

int worker_init(struct worker *w, int id, worker_accept_fn on_accept, worker_stop_fn on_stop,
                worker_cmd_fn on_cmd, void *ctx)
{
    memset(w, 0, sizeof *w);
    w->id = id;
    w->on_accept = on_accept;
    w->on_stop = on_stop;
    w->on_cmd = on_cmd;
    w->ctx = ctx;
    w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
    if (!w->loop)
        return -1;
    ev_timer_init(&w->fd_retry, on_fd_retry, WORKER_FD_RETRY_S, 0);
    w->fd_retry.data = w;
    ev_async_init(&w->wake, on_wake);
    w->wake.data = w;
    ev_async_start(w->loop, &w->wake);
    ev_set_userdata(w->loop, w);
    return reserve_fill(w);
}

int worker_add_listener(struct worker *w, int fd)
{
    return worker_add_listener_tag(w, fd, 0);
}

int worker_add_listener_tag(struct worker *w, int fd, int tag)
{
    if (w->nlisteners >= WORKER_MAX_LISTENERS)
        return -1;
    struct worker_listener *l = &w->listeners[w->nlisteners++];
    l->w = w;
    l->fd = fd;
    l->tag = tag;
    ev_io_init(&l->io, on_listen, fd, EV_READ);
    l->io.data = l;
    ev_io_start(w->loop, &l->io);
    return 0;
}

void worker_set_busy_poll(struct worker *w, unsigned us)
{
    w->busy_poll_us = us;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Invokes the loop's pending callbacks, counting the passes that had any (busy poll). */
static void invoke_counting(struct ev_loop *loop)
{
    struct worker *w = ev_userdata(loop);
    if (ev_pending_count(loop))
        w->passes++;
    ev_invoke_pending(loop);
}

/* One blocking pass of the loop, then non-blocking passes (epoll_wait with a zero timeout)
 * until busy_poll_us went by without a callback; only then does it block again. */
static void run_busy(struct worker *w)
{
    uint64_t spin = (uint64_t)w->busy_poll_us * 1000u;
    ev_set_invoke_pending_cb(w->loop, invoke_counting);
    while (!w->ended) {
        ev_run(w->loop, EVRUN_ONCE);
        uint64_t until = mono_ns() + spin;
        int hit = 0;
        while (!w->ended && mono_ns() < until) {
            unsigned long before = w->passes;
            ev_run(w->loop, EVRUN_NOWAIT);
            if (w->passes != before) {
                hit = 1;
                until = mono_ns() + spin;
            }
        }
        if (hit)
            STAT_INC(&w->stats.busy_hits);
        else
            STAT_INC(&w->stats.busy_misses);
    }
}

void worker_run(struct worker *w)
{
    if (w->busy_poll_us)
        run_busy(w);
    else
        ev_run(w->loop, 0);
}

static void *thread_main(void *arg)
{
    struct worker *w = arg;
#ifdef __linux__
    char name[16]; /* "mtproxy/wN": how top, perf and bench/api.py tell the threads apart */
    snprintf(name, sizeof name, "mtproxy/w%d", w->id);
    pthread_setname_np(pthread_self(), name);
#endif
    worker_run(w);
    return NULL;
}

void worker_thread_idle(const char *who)
{
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0)
        log_debug("%s: nice 19: %s", who, strerror(errno));
#ifdef SCHED_IDLE
    struct sched_param sp = {0};
    int rc = pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    if (rc)
        log_debug("%s: SCHED_IDLE: %s", who, strerror(rc));
#endif
}

int worker_start(struct worker *w)
{
    int rc = pthread_create(&w->thread, NULL, thread_main, w);
    if (rc == 0)
        w->started = 1;
    return rc;
}

void worker_request_stop(struct worker *w)
{
    atomic_store(&w->stop_requested, 1);
    ev_async_send(w->loop, &w->wake);
}

void worker_post(struct worker *w, int cmd)
{
    atomic_fetch_or(&w->cmd_pending, cmd);
    ev_async_send(w->loop, &w->wake);
}

void worker_join(struct worker *w)
{
    if (w->started)
        pthread_join(w->thread, NULL);
    w->started = 0;
    for (int i = 0; i < w->nlisteners; i++)
        close(w->listeners[i].fd);
    w->nlisteners = 0;
    if (w->loop)
        ev_loop_destroy(w->loop);
    w->loop = NULL;
    while (w->nreserve > 0)
        close(w->reserve[--w->nreserve]);
    free(w->reserve);
    w->reserve = NULL;
    w->reserve_cap = w->reserve_owed = 0;
}

void worker_backoff_accept(struct worker *w, int err)
{
    /* Out of descriptors or memory: live connections keep running; new ones wait in the
     * backlog until the retry timer fires. Warned at most every 10 s. */
    ev_tstamp now = ev_now(w->loop);
    if (now - w->last_fd_warn >= 10) {
        w->last_fd_warn = now;
        log_warn("worker %d: %s; pausing accept (retried every %.0f ms)", w->id, strerror(err),
                 WORKER_FD_RETRY_S * 1000);
    }
    listeners_set(w, 0);
    if (!ev_is_active(&w->fd_retry)) {
        ev_timer_set(&w->fd_retry, WORKER_FD_RETRY_S, 0);
        ev_timer_start(w->loop, &w->fd_retry);
    }
}

void worker_reserve_release(struct worker *w)
{
    if (w->reserve_owed == 0)
        return;
    /* Each owed descriptor is held (the spare may be missing): free one for the caller. */
    w->reserve_owed--;
    close(w->reserve[--w->nreserve]);
}

int worker_reserve_hold(struct worker *w)
{
    if (reserve_fill(w))
        return -1;
    w->reserve_owed++;
    return 0;
}

int worker_reserve_spend(struct worker *w)
{
    if (w->nreserve <= w->reserve_owed)
        return -1;
    close(w->reserve[--w->nreserve]);
    return 0;
}

void worker_pause_accept(struct worker *w)
{
    if (w->paused)
        return;
    w->paused = 1;
    WORKER_STAT_INC(&w->stats.accept_pauses);
    listeners_set(w, 0);
}

void worker_resume_accept(struct worker *w)
{
    if (!w->paused)
        return;
    w->paused = 0;
    if (!ev_is_active(&w->fd_retry) && !atomic_load(&w->stop_requested))
        listeners_set(w, 1);
}
