/* preflight.c: the worker count, the file-descriptor budget and a drawn secret, computed once for start-up and for doctor. */
#include "config/preflight.h"

#include <sys/resource.h>
#include <unistd.h>

#include "crypto/crypto.h"
#include "conn/conn.h"
#include "admin/metrics.h"
#include "upstream/middle.h"

int preflight_workers(const struct options *o)
{
    if (o->workers > 0)
        return o->workers;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 256 ? 256 : n) : 1;
}

void preflight_fds(const struct options *o, int nworkers, const struct me_table *me,
                   unsigned long long limit, struct preflight_fds *out)
{
    long long reserve =
        (long long)nworkers * (o->nlisten + 4 + 1 + 2 * PROXY_PIPES_PER_WORKER +
                               (o->metrics_on ? METRICS_FDS_PER_WORKER : 0)) + 32;
    long long ids = 0; /* pooled DC sockets: per worker, per DC id */
    for (int i = 0; i < o->ndcs; i++)
        ids += i == 0 || o->dcs[i].id != o->dcs[i - 1].id;
    reserve += (long long)nworkers * o->dc_pool * (ids + (o->dc_builtin ? 6 : 0));
    if (me) /* ME links, with room for a reload's new set while the old one drains */
        reserve += 2LL * nworkers * o->me_pool * me->naddrs;
    out->reserve = reserve;
    out->need = 2LL * o->max_connections + reserve;
    out->limit = limit;
    out->fits = limit == (unsigned long long)RLIM_INFINITY || (long long)limit >= out->need;
    out->fit = out->fits ? o->max_connections
               : limit >= (unsigned long long)reserve ? (long long)(limit - reserve) / 2 : 0;
}

unsigned long long preflight_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return (unsigned long long)RLIM_INFINITY;
    return (unsigned long long)rl.rlim_max;
}

int preflight_draw_key(struct secret *s)
{
    do {
        if (crypto_random(s->key, sizeof s->key))
            return -1;
    } while (s->kind == SECRET_PLAIN && (s->key[0] == 0xdd || s->key[0] == 0xee));
    return 0;
}
