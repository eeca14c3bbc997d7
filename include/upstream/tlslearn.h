/* tlslearn.h: learns the fronting site's TLS first flight and idle close, in worker 0's loop. */
#ifndef MTPROXY_PROXY_TLSLEARN_H
#define MTPROXY_PROXY_TLSLEARN_H

#include <ev.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/sock.h"
#include "proto/tlsprofile.h"
#include "config/options.h"
#include "upstream/dialer.h"

#define TLSLEARN_SLOTS 4        /* published profiles; a reader's copy outlives 3 refreshes */
#define TLSLEARN_ROUNDS 3       /* handshakes per learning (their spread is the variation) */
#define TLSLEARN_BUF 65536      /* bytes of a server's flight read at most */

/* One connection of the learner (a handshake, or the idle probe). */
struct tlslearn_conn {
    int fd;
    ev_io io;
    ev_timer timer;
    ev_tstamp start;
    int connected;
    struct dial dial;             /* its connect (and SOCKS5 handshake) while not connected */
};

/*
 * Shared by all workers: workers read the current profile (tlslearn_current); only the loop
 * the learner was started on writes (a new slot, then the index, release/acquire).
 */
struct tlslearn {
    int enabled;                  /* tls-profile = on and a target */
    struct sock_addr target;      /* mask-host (or the first ee domain) : mask-port */
    char sni[TLSPROFILE_HOST_MAX + 1];
    char path[OPT_PATH_MAX + 16]; /* state-file + ".tls-profile" */
    double refresh_s;
    double idle_max_s;            /* the idle probe waits at most this long */
    int proxy_protocol;           /* mask-proxy-protocol: 0, 1 or 2 (a header starts each) */
    int via_socks;                /* socks5 with socks5-mask: the site through that server */
    struct socks5_server socks;
    struct sock_addr socks_addr;
    struct tlsprofile slots[TLSLEARN_SLOTS];
    atomic_uint cur;              /* 1 + index of the published slot; 0 = none */
    size_t builtin;               /* the built-in used while nothing is learned */
    /* learner state (its loop only) */
    struct ev_loop *loop;
    ev_timer refresh;
    struct tlslearn_conn hs, idle;
    uint8_t *buf;
    size_t len;
    int round;
    struct tlsprofile acc;        /* rounds merged so far */
    int failed_logged;            /* "cannot learn" said once until the next success */
};

/* Sets l up from the options: target (resolved here, blocking: start-up only), SNI, file path,
 * and the profile stored by an earlier run if the file holds one for this SNI. Disabled (and
 * 0 returned) with tls-profile off or no ee secret. Returns 0, or -1 with a message in err. */
int tlslearn_init(struct tlslearn *l, const struct options *o, char *err, size_t errlen);

/* Starts learning on loop (now, then every refresh). Call before the loop runs or from it. */
void tlslearn_start(struct tlslearn *l, struct ev_loop *loop);

/* Stops the learner's watchers and closes its sockets (from its loop, or after it ended). */
void tlslearn_stop(struct tlslearn *l);

/* The profile to follow now: the latest learned, else the built-in one (never NULL). Any
 * thread; the pointer stays valid for at least TLSLEARN_SLOTS - 1 more publications. */
const struct tlsprofile *tlslearn_current(const struct tlslearn *l);

/* For `mtproxy doctor`: describes the profile the proxy with this config uses (reads the
 * file state_file + ".tls-profile" that the running proxy keeps; if it is absent or unreadable,
 * says so and names the built-in profile). now: unix seconds. Returns the length written. */
size_t tlslearn_describe_file(const char *state_file, const char *sni, int64_t now, char *out,
                              size_t cap);

#endif
