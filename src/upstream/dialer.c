/* dialer.c: one nonblocking connect, optionally through SOCKS5, for every caller that dials out. */
#include "upstream/dialer.h"

#include <errno.h>
#include <string.h>

_Static_assert(sizeof(struct dial) <= 10, "struct dial is embedded in every connection");

static enum dial_verdict failed(struct dial_result *r, int err, int socks, int code,
                                const char *why)
{
    r->err = err;
    r->socks = socks;
    r->code = code;
    r->why = why;
    return DIAL_FAIL;
}

enum dial_verdict dial_start(struct dial *d, const struct dial_to *to, int *fd,
                             struct dial_result *r)
{
    memset(d, 0, sizeof *d); /* SOCKS_STEP_NONE: the TCP connect is pending */
    *fd = sock_connect(to->socks ? to->socks_addr : to->target, to->opts);
    if (*fd >= 0)
        return DIAL_WAIT_WRITE;
    int e = errno;
    failed(r, e, 0, 0, strerror(e));
    return e == EMFILE || e == ENFILE ? DIAL_NO_FD : DIAL_FAIL;
}

enum dial_verdict dial_step(struct dial *d, int fd, const struct dial_to *to, int revents,
                            struct dial_result *r)
{
    const char *why = "socks5: handshake failed";
    int code = 0;
    enum socks_result s;
    switch (d->sd.step) {
    case SOCKS_STEP_NONE: {
        if (revents && !(revents & EV_WRITE))
            return DIAL_WAIT_WRITE;
        int e = sock_connect_result(fd);
        if (e)
            return failed(r, e, 0, 0, strerror(e));
        if (!to->socks) {
            d->sd.step = SOCKS_STEP_DONE;
            return DIAL_DONE;
        }
        s = socks_dial_start(&d->sd, fd, to->socks, &why);
        break;
    }
    case SOCKS_STEP_DONE:
        return DIAL_DONE;
    default:
        if (revents && !(revents & EV_READ))
            return DIAL_WAIT_READ;
        s = socks_dial_read_bound(&d->sd, fd, to->socks, &to->target->u.sa, &why, &code,
                                  to->bound);
        break;
    }
    if (s == SOCKS_DIAL_FAIL)
        return failed(r, 0, 1, code, why);
    return s == SOCKS_DIAL_WAIT ? DIAL_WAIT_READ : DIAL_DONE;
}
