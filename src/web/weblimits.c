/* weblimits.c: the WEB session table's defaults (the contract's limits, docs/web.md 7), its
 * process-wide counts, the names /metrics and X-Carrier-Mode use, and its clock. */
#include "web/websess.h"
#include "web/webint.h"

#include "config/options.h"
#include "http/httpd.h"
#include "proto/webframe.h"

void websess_limits_default(struct websess_limits *l)
{
    *l = (struct websess_limits){
        .sessions = 128,
        .streams = 4096,
        .streams_per_session = 128,
        .closed_ids = 4096,
        .pending_session = 32u << 20,
        .pending_process = 512u << 20,
        .items_session = 16384,
        .items_process = 262144,
        .item_charge = 256,
        .bootstraps = 512,
        .session_rate = 600,
        .session_burst = 128,
        .stream_rate = 6000,
        .stream_burst = 512,
        .bootstrap_rate = 1200,
        .bootstrap_burst = 256,
        .body_bytes = 2u << 20,
        .frame_payload = WEBFRAME_MAX_PAYLOAD,
        .data_chunk = WEBFRAME_DATA_CHUNK,
        .batch_bytes = 2u << 20,
        .bootstrap_ms = 120000,
        .grace_ms = 120000,
        .poll_ms = 25000,
        .dial_ms = 5000,
        .dials = 256,
    };
}

void websess_shared_init(struct websess_shared *g)
{
    atomic_init(&g->sessions, 0);
    atomic_init(&g->streams, 0);
    atomic_init(&g->bootstraps, 0);
    atomic_init(&g->pending_bytes, 0);
    atomic_init(&g->pending_items, 0);
}

const char *websess_mode_name(enum websess_mode mode)
{
    switch (mode) {
    case WEBSESS_HTTPS_LANES:
        return "https-lanes";
    case WEBSESS_WEBSOCKET:
        return "websocket";
    case WEBSESS_WEBSOCKET_LANES:
        return "websocket-lanes";
    default:
        return "https";
    }
}

const char *websess_reason_name(enum websess_reason r)
{
    static const char *const names[WEBSESS_R_COUNT] = {
        [WEBSESS_R_BOOTSTRAPS] = "bootstraps",
        [WEBSESS_R_BOOTSTRAP_RATE] = "bootstrap_rate",
        [WEBSESS_R_BOOTSTRAP_UNKNOWN] = "bootstrap_unknown",
        [WEBSESS_R_HELLO] = "hello",
        [WEBSESS_R_SESSIONS] = "sessions",
        [WEBSESS_R_SESSION_RATE] = "session_rate",
        [WEBSESS_R_STREAMS_SESSION] = "streams_session",
        [WEBSESS_R_STREAMS] = "streams",
        [WEBSESS_R_STREAM_RATE] = "stream_rate",
        [WEBSESS_R_PENDING_SESSION] = "pending_session",
        [WEBSESS_R_PENDING_PROCESS] = "pending_process",
        [WEBSESS_R_BODY] = "body",
        [WEBSESS_R_PROTOCOL] = "protocol",
        [WEBSESS_R_RANDOM] = "random",
    };
    return (unsigned)r < WEBSESS_R_COUNT && names[r] ? names[r] : "other";
}

void websess_limits_from(const struct options *opt, struct websess_limits *l)
{
    websess_limits_default(l);
    l->sessions = (uint32_t)opt->web_sessions;
    l->streams = (uint32_t)opt->web_streams;
    l->streams_per_session = (uint32_t)opt->web_streams_per_session;
    l->bootstraps = (uint32_t)opt->web_bootstraps;
    l->pending_session = opt->web_pending_session;
    l->pending_process = opt->web_pending_process;
    l->body_bytes = (uint32_t)opt->web_body_max;
    l->session_rate = (uint32_t)opt->web_session_rate;
    l->stream_rate = (uint32_t)opt->web_stream_rate;
    l->bootstrap_rate = (uint32_t)opt->web_bootstrap_rate;
    l->bootstrap_ms = opt->web_bootstrap_ttl_ms;
    l->grace_ms = opt->web_grace_ms;
    l->poll_ms = opt->web_poll_ms;
    l->instance = (uint8_t)opt->web_instance;
    if (l->session_burst > l->session_rate)
        l->session_burst = l->session_rate;
    if (l->stream_burst > l->stream_rate)
        l->stream_burst = l->stream_rate;
    if (l->bootstrap_burst > l->bootstrap_rate)
        l->bootstrap_burst = l->bootstrap_rate;
}

/* The table's clock (webint.h): milliseconds, monotonic. */
int64_t web_now(void)
{
    return (int64_t)(httpd_clock(CLOCK_MONOTONIC) * 1000.0);
}
