/* metrics_stats.c: the /stats JSON document, and the user objects /users shares with it. */
#include "admin/metrics_render.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "config/prefix.h"
#include "config/reload.h"
#include "users/ja4stat.h"

/* /stats's (and /users's) opening: "{" the version, times, workers, links and summary. */
void metrics_stats_head(const struct metrics_shared *ms, const struct metrics_totals *t,
                        int links, struct sbuf *out)
{
    time_t now = time(NULL);
    sbuf_printf(out,
                "{\"version\":\"%s\",\"start_time\":%lld,\"now\":%lld,\"uptime\":%lld,"
                "\"workers\":%d,\"links\":%s,\"summary\":",
                MTPROXY_VERSION, (long long)ms->start_time, (long long)now,
                (long long)(now - ms->start_time), ms->nworkers, links ? "true" : "false");
    counters_json_summary(&t->s, out);
}

/* User i of g as a /stats user object; its links (and address) only if links. host and port:
 * options_link_host's. */
void metrics_user_json(const struct gen *g, int i, const char *host, int port, int links,
                       struct sbuf *out)
{
    const struct options *o = &g->opt;
    const struct secret *sec = &o->secrets[i];
    struct user_totals ut;
    metrics_user_totals(g, i, &ut);
    uint64_t quota;
    int64_t expires;
    metrics_user_limits(g, i, &quota, &expires);
    char ql[32] = "null", ex[32] = "null";
    if (quota)
        snprintf(ql, sizeof ql, "%llu",
                 (unsigned long long)(quota > ut.quota_used ? quota - ut.quota_used : 0));
    if (expires)
        snprintf(ex, sizeof ex, "%lld", (long long)expires);
    sbuf_printf(out, "{\"name\":\"%s\",\"kind\":\"%s\"", sec->name,
                sec->kind == SECRET_EE ? "ee" : sec->kind == SECRET_DD ? "dd" : "plain");
    metrics_user_counters_json(&ut, out);
    sbuf_printf(out, ",\"quota_left\":%s,\"expires\":%s", ql, ex);
    const char *period;
    int64_t reset = metrics_user_quota_reset(g, i, &period);
    if (reset) /* a periodic quota only: its period and the next reset (unix s) */
        sbuf_printf(out, ",\"quota_period\":\"%s\",\"quota_reset\":%lld", period,
                    (long long)reset);
    if (g->users && g->users->fleet && g->uid) /* limits-store: the other instances' share */
        sbuf_printf(out, ",\"fleet_connections\":%u,\"fleet_addresses\":%u",
                    atomic_load(&users_shared(g->users, g->uid[i])->fleet_conns),
                    atomic_load(&users_shared(g->users, g->uid[i])->fleet_ips));
    char tg[1024], https[1024], uhost[256];
    snprintf(uhost, sizeof uhost, "%s", host);
    int uport = prefix_link_host(o, i, uhost, sizeof uhost, port);
    if (links && o->user_addr) /* as secret as the links: a censor would block them */
        sbuf_printf(out, ",\"address\":\"%s\"", uhost);
    if (links && !secret_links(sec, uhost, uport, tg, sizeof tg, https, sizeof https))
        sbuf_printf(out, ",\"tg\":\"%s\",\"https\":\"%s\"", tg, https);
    if (links && o->web_on && /* plain and dd users: WEB proxy links too */
        !secret_web_links(sec, o->web_host, tg, sizeof tg, https, sizeof https))
        sbuf_printf(out, ",\"web_tg\":\"%s\",\"web_https\":\"%s\"", tg, https);
    sbuf_printf(out, "}");
}

int metrics_render_json(const struct metrics_shared *ms, const struct gen *g, int links,
                        struct sbuf *out)
{
    struct metrics_totals *t = malloc(sizeof *t);
    if (!t)
        return -1;
    metrics_totals_collect(ms, t);
    const struct options *o = &g->opt;
    char host[256];
    int port = options_link_host(o, host, sizeof host);
    metrics_stats_head(ms, t, links, out);
    sbuf_printf(out, ",\"users\":[");
    for (int i = 0; i < o->nsecrets; i++) {
        sbuf_printf(out, "%s", i ? "," : "");
        metrics_user_json(g, i, host, port, links, out);
    }
    sbuf_printf(out, "],\"metrics\":[");
    metrics_samples_json(ms, g, t, out);
    ja4stat_render_json(ms->pws, ms->nworkers, g, out);
    sbuf_printf(out, "\n]}\n");
    free(t);
    return out->failed ? -1 : 0;
}
