/* test_worker.c: the accept loop's descriptor reserve (one per accepted socket, plus a spare). */
#include "core/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_ACCEPTED 16

static int accepted[MAX_ACCEPTED];
static int naccepted;

static void on_accept(struct worker *w, int fd, const struct sock_addr *peer) {
    (void)w, (void)peer;
    assert_true(naccepted < MAX_ACCEPTED);
    accepted[naccepted++] = fd;
}

/* Descriptor numbers in use, below bound. */
static int fds_used(int bound) {
    int n = 0;
    for (int fd = 0; fd < bound; fd++)
        n += fcntl(fd, F_GETFD) != -1 || errno != EBADF;
    return n;
}

/* Lowers RLIMIT_NOFILE so that exactly n more descriptors can be opened; returns the old. */
static struct rlimit limit_free(int n) {
    struct rlimit old, rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    rl = old;
    int lim = 0;
    for (int avail = 0; avail < n || fcntl(lim, F_GETFD) != -1; lim++)
        avail += fcntl(lim, F_GETFD) == -1;
    rl.rlim_cur = (rlim_t)lim;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    return old;
}

/* A worker listening on 127.0.0.1 (an ephemeral port); returns the listener's address. */
static void worker_setup(struct worker *w, struct sock_addr *addr) {
    char err[128];
    naccepted = 0;
    assert_int_equal(worker_init(w, 0, on_accept, NULL, NULL, NULL), 0);
    assert_int_equal(sock_addr_parse("127.0.0.1:0", 0, 1, addr, err, sizeof err), 0);
    int l = sock_listen(addr, 16, 0, NULL, err, sizeof err);
    assert_true(l >= 0);
    addr->len = sizeof addr->u;
    assert_int_equal(getsockname(l, &addr->u.sa, &addr->len), 0);
    assert_int_equal(worker_add_listener(w, l), 0);
}

/* A blocking client connected to addr (waiting in the backlog until accepted). */
static int client(const struct sock_addr *addr) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, &addr->u.sa, addr->len), 0);
    return fd;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs w's loop until want sockets are accepted or seconds pass. */
static void spin(struct worker *w, int want, double seconds) {
    double end = now_s() + seconds;
    while (naccepted < want && now_s() < end) {
        ev_run(w->loop, EVRUN_NOWAIT);
        usleep(5000);
    }
}

static void close_accepted(void) {
    for (int i = 0; i < naccepted; i++)
        close(accepted[i]);
}

static void test_reserve_per_accepted_socket_plus_spare(void **state) {
    (void)state;
    int before = fds_used(1024);
    struct worker w;
    struct sock_addr addr;
    worker_setup(&w, &addr);
    assert_int_equal(w.nreserve, 1); /* made at start: the spare for the first accept */
    int c[3];
    for (int i = 0; i < 3; i++)
        c[i] = client(&addr);
    spin(&w, 3, 2.0);
    assert_int_equal(naccepted, 3);
    assert_int_equal(w.reserve_owed, 3);
    assert_int_equal(w.nreserve, 4);
    int held = fds_used(1024);
    for (int i = 0; i < 3; i++)
        worker_reserve_release(&w);
    assert_int_equal(w.reserve_owed, 0);
    assert_int_equal(w.nreserve, 1);
    assert_int_equal(fds_used(1024), held - 3); /* each release closes one */
    worker_reserve_release(&w);                 /* more releases than accepts: ignored */
    assert_int_equal(w.nreserve, 1);
    assert_int_equal(w.reserve_owed, 0);
    close_accepted();
    for (int i = 0; i < 3; i++)
        close(c[i]);
    worker_join(&w);
    assert_int_equal(fds_used(1024), before);
}

/* A socket handed over without a listener holds a reserve descriptor as an accept does. */
static void test_reserve_hold(void **state) {
    (void)state;
    struct worker w;
    struct sock_addr addr;
    worker_setup(&w, &addr);
    assert_int_equal(worker_reserve_hold(&w), 0);
    assert_int_equal(worker_reserve_hold(&w), 0);
    assert_int_equal(w.reserve_owed, 2);
    assert_int_equal(w.nreserve, 2); /* the two held; the spare is made at the next accept */
    worker_reserve_release(&w);
    worker_reserve_release(&w);
    assert_int_equal(w.reserve_owed, 0);
    assert_int_equal(w.nreserve, 0);
    worker_join(&w);
}

/* At RLIMIT_NOFILE, accept takes the last free descriptor: the accepted socket can still open
 * its second one (the released reserve), and the worker accepts no more until it can hold a
 * reserve descriptor again; then it resumes on its retry timer. */
static void test_at_the_limit_accepts_only_what_it_can_serve(void **state) {
    (void)state;
    struct worker w;
    struct sock_addr addr;
    worker_setup(&w, &addr);
    int c1 = client(&addr), c2 = client(&addr);
    struct rlimit old = limit_free(1);
    spin(&w, 2, 0.2);
    assert_int_equal(naccepted, 1);
    assert_true(STAT_GET(&w.stats.accept_fd_limit) >= 1);
    assert_true(ev_is_active(&w.fd_retry)); /* paused, not spinning on EMFILE */
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(up, -1); /* the accept took the last one */
    assert_int_equal(errno, EMFILE);
    worker_reserve_release(&w);
    up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(up >= 0); /* the upstream socket of the accepted client */
    close(up);
    close(accepted[0]);
    spin(&w, 2, 2.0); /* two descriptors back: the second client and its reserve */
    assert_int_equal(naccepted, 2);
    assert_int_equal(w.reserve_owed, 1);
    assert_int_equal(w.nreserve, 1);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    close(accepted[1]);
    close(c1);
    close(c2);
    worker_join(&w);
}

static void test_spend_takes_only_the_spare(void **state) {
    (void)state;
    struct worker w;
    struct sock_addr addr;
    worker_setup(&w, &addr);
    int c1 = client(&addr);
    spin(&w, 1, 2.0);
    assert_int_equal(naccepted, 1);
    assert_int_equal(w.nreserve, 2);
    assert_int_equal(worker_reserve_spend(&w), 0);
    assert_int_equal(w.nreserve, 1);
    assert_int_equal(worker_reserve_spend(&w), -1); /* the other one is the accepted socket's */
    assert_int_equal(w.nreserve, 1);
    int c2 = client(&addr); /* accepting makes a spare again first */
    spin(&w, 2, 2.0);
    assert_int_equal(naccepted, 2);
    assert_int_equal(w.reserve_owed, 2);
    assert_int_equal(w.nreserve, 3);
    worker_reserve_release(&w);
    worker_reserve_release(&w);
    assert_int_equal(w.nreserve, 1);
    close_accepted();
    close(c1);
    close(c2);
    worker_join(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_per_accepted_socket_plus_spare),
        cmocka_unit_test(test_reserve_hold),
        cmocka_unit_test(test_at_the_limit_accepts_only_what_it_can_serve),
        cmocka_unit_test(test_spend_takes_only_the_spare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
