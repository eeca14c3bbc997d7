/* counters.h: the worker counters, declared once; struct proxy_stats, its sum, /metrics, /stats and the SIGUSR1 lines are made from this table. */
#ifndef MTPROXY_PROXY_COUNTERS_H
#define MTPROXY_PROXY_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/stat.h"

/*
 * The table, in /metrics order. Five kinds of row (each use of the table passes five macros):
 *   F(metric, type, help)      a metric family (name without "mtproxy_", COUNTER or GAUGE): the
 *                              samples of the rows after it, up to the next F or H
 *   C(field, sample, json, log) a counter: a stat_t field of struct proxy_stats, and
 *       sample  CL0 (one unlabelled sample of the family above), CL1(key, value),
 *               CL2(key, value, key, value), or CL_NONE (not in /metrics)
 *       json    CJ(pos, key): the pos-th key of /stats's "summary" (rows with one pos are
 *               summed), or CJ_NONE
 *       log     CLOG(line, pos, label): " label N" at pos of SIGUSR1 line `line` (enum
 *               counters_log), or CLOG_NONE
 *   V(counter, sample)         another sample of a counter declared elsewhere (closed[r])
 *   A(field, dims)             an array of counters (by close reason, kind, DC slot), summed with
 *                              the rest; its samples come from H rows
 *   H(id)                      samples or families the metrics server writes by hand
 *                              (metrics.c: emit_hand, CH_<id>): arrays, and what is computed
 *                              from other structs (arenas, pools, users, CPU)
 */
#define PROXY_COUNTERS(F, C, V, A, H)                                                              \
    H(INFO) /* build, start time, workers, users, config generation */                             \
    F("connections_accepted_total", COUNTER, "Client connections accepted.")                       \
    C(accepted, CL0, CJ(0, "accepted"), CLOG(MAIN, 0, "accepted"))                                 \
    C(active, CL_NONE, CJ(1, "active"), CLOG(MAIN, 1, "active")) /* gauge: open now */             \
    F("connections_total", COUNTER,                                                                \
      "Client connections by what they turned out to be (obfs2, dd, tls, fronted).")               \
    H(KIND_TOTAL)                                                                                  \
    F("connections_active", GAUGE, "Open client connections by kind (handshake: not known yet).")  \
    H(KIND_ACTIVE)                                                                                 \
    F("connections_closed_total", COUNTER, "Closed connections by close reason.")                  \
    H(CLOSED)                                                                                      \
    F("handshakes_total", COUNTER,                                                                 \
      "Handshakes by result (ok; failed, by reason: rejected = not a client for our secrets, "     \
      "then fronted or held; timeout; early_eof; protocol).")                                      \
    /* valid headers */                                                                            \
    C(handshakes, CL1("result", "ok"), CJ(2, "handshakes"), CLOG(MAIN, 2, "handshakes"))           \
    /* clients we would not serve (then masked or held) */                                         \
    C(rejected, CL2("result", "failed", "reason", "rejected"), CJ(3, "rejected"),                  \
      CLOG(TLS, 1, "rejected"))                                                                    \
    V(closed[CR_HANDSHAKE_TIMEOUT], CL2("result", "failed", "reason", "timeout"))                  \
    V(closed[CR_CLIENT_EARLY_EOF], CL2("result", "failed", "reason", "early_eof"))                 \
    V(closed[CR_CLIENT_PROTOCOL], CL2("result", "failed", "reason", "protocol"))                   \
    F("tls_handshakes_total", COUNTER, "FakeTLS hellos answered.")                                 \
    C(tls_handshakes, CL0, CJ_NONE, CLOG(TLS, 0, "tls_handshakes"))                                \
    /* a probe's cost; with tls-sni-check only its domain's secrets */                             \
    F("tls_hmacs_total", COUNTER, "HMACs computed to check FakeTLS hellos.")                       \
    C(tls_hmacs, CL0, CJ_NONE, CLOG(TLS, 4, "tls_hmacs"))                                          \
    F("replays_total", COUNTER,                                                                    \
      "Handshakes refused as replays (cache: this process; store: the fleet's store).")            \
    C(replays, CL1("source", "cache"), CJ(5, "replays"), CLOG(TLS, 3, "replays"))                  \
    /* seen by the replay store (another instance, or this one before a restart) */                \
    C(store_replays, CL1("source", "store"), CJ(5, "replays"), CLOG(ACCESS, 6, "store_replays"))   \
    /* the store did not answer in time (or was down): replay-store-fail applied */                \
    F("replay_store_failures_total", COUNTER,                                                      \
      "Handshakes the replay store did not answer in time for.")                                   \
    C(store_failed, CL0, CJ_NONE, CLOG(ACCESS, 7, "store_failed"))                                 \
    F("fronted_total", COUNTER, "Connections forwarded to the real site.")                         \
    C(masked, CL0, CJ(4, "fronted"), CLOG(TLS, 2, "masked"))                                       \
    F("access_refusals_total", COUNTER,                                                            \
      "Connections closed at accept: access list (deny, not_allowed), PROXY header sender not "    \
      "trusted, too many unproven connections from one address.")                                  \
    /* closed at accept: a deny entry names the source */                                          \
    C(acl_denied, CL1("reason", "deny"), CJ_NONE, CLOG(ACCESS, 0, "acl_denied"))                   \
    C(acl_not_allowed, CL1("reason", "not_allowed"), CJ_NONE,                                      \
      CLOG(ACCESS, 1, "acl_not_allowed")) /* allow entries exist, none names it */                 \
    C(pp_untrusted, CL1("reason", "proxy_protocol_untrusted"), CJ_NONE,                            \
      CLOG(ACCESS, 2, "pp_untrusted")) /* sender not in proxy-protocol-from */                     \
    C(strangers_refused, CL1("reason", "probe_limit_per_ip"), CJ_NONE,                             \
      CLOG(TLS, 5, "strangers_refused"))                                                           \
    C(acc_rate, CL1("reason", "accept_rate"), CJ_NONE, CLOG(LIMITS, 1, "acc_rate"))                \
    F("proxy_protocol_total", COUNTER, "PROXY headers malformed (bad) or LOCAL.")                  \
    /* proxy-protocol: malformed or missing PROXY header */                                        \
    C(pp_bad, CL1("result", "bad"), CJ_NONE, CLOG(ACCESS, 3, "pp_bad"))                            \
    C(pp_local, CL1("result", "local"), CJ_NONE, CLOG(ACCESS, 4, "pp_local")) /* health check */   \
    F("user_refusals_total", COUNTER,                                                              \
      "Valid clients refused by a user limit (per user: mtproxy_user_limit_refusals_total).")      \
    C(user_refused, CL0, CJ_NONE, CLOG(LIMITS, 0, "user_refused"))                                 \
    F("handshake_cap_closed_total", COUNTER,                                                       \
      "Unfinished handshakes closed for max-handshakes (the oldest first).")                       \
    C(handshake_cap, CL0, CJ_NONE, CLOG(LIMITS, 2, "handshake_cap"))                               \
    F("hello_budget_drops_total", COUNTER, "FakeTLS hellos dropped: the hello buffers were full.") \
    C(hello_budget, CL0, CJ_NONE, CLOG(TLS, 6, "hello_budget"))                                    \
    /* hellos naming none of our domains, dropped or refused */                                    \
    C(unknown_sni, CL_NONE, CJ_NONE, CLOG(TLS, 7, "unknown_sni"))                                  \
    F("bytes_total", COUNTER, "Payload bytes relayed (up: client to DC or site, down: back).")     \
    C(bytes_up, CL1("direction", "up"), CJ(6, "bytes_up"), CLOG(MAIN, 5, "bytes_up"))              \
    C(bytes_down, CL1("direction", "down"), CJ(7, "bytes_down"), CLOG(MAIN, 6, "bytes_down"))      \
    F("dc_bytes_total", COUNTER, "Payload bytes relayed per DC (as resolved).")                    \
    H(DC_BYTES)                                                                                    \
    F("dc_connects_total", COUNTER, "DC connections established.")                                 \
    C(dc_connects, CL0, CJ_NONE, CLOG(MAIN, 3, "dc_connects"))                                     \
    F("dc_connect_failures_total", COUNTER, "Failed DC connection attempts.")                      \
    C(dc_connect_fails, CL0, CJ_NONE, CLOG(MAIN, 4, "dc_connect_fails")) /* one address each */    \
    F("socks5_failures_total", COUNTER, "SOCKS5 handshakes that failed.")                          \
    C(socks_fails, CL0, CJ_NONE, CLOG(ACCESS, 5, "socks_fails")) /* refused, closed */             \
    H(DC_POOL)                                                                                     \
    H(USERS)                                                                                       \
    /* middle mode */                                                                              \
    H(MIDDLE_MODE)                                                                                 \
    F("me_links_total", COUNTER,                                                                   \
      "ME link events: handshakes completed, handshakes failed after the nonce (check "            \
      "nat-info), connects failed, ready links lost.")                                             \
    /* ME links: handshakes completed, failed after the nonce, connects failed */                  \
    C(me_handshakes, CL1("event", "handshake"), CJ_NONE, CLOG(ME, 0, "handshakes"))                \
    C(me_handshake_fails, CL1("event", "handshake_failure"), CJ_NONE,                              \
      CLOG(ME, 1, "handshake_fails"))                                                              \
    C(me_connect_fails, CL1("event", "connect_failure"), CJ_NONE, CLOG(ME, 2, "connect_fails"))    \
    C(me_link_drops, CL1("event", "drop"), CJ_NONE, CLOG(ME, 3, "link_drops"))                     \
    F("me_links_open", GAUGE, "ME links past the handshake now (all workers).")                    \
    C(me_links_open, CL0, CJ_NONE, CLOG(ME, 12, "links_open"))                                     \
    F("me_clients_closed_total", COUNTER,                                                          \
      "Middle-mode clients closed: their link died, over me-client-buffer (slow), or holding "     \
      "a paused link past me-stall-grace (stalled).")                                              \
    C(me_dead_closed, CL1("reason", "link_dead"), CJ_NONE, CLOG(ME, 4, "dead_closed"))             \
    C(me_slow_closed, CL1("reason", "slow"), CJ_NONE, CLOG(ME, 5, "slow_closed"))                  \
    /* closed after holding a paused link past me-stall-grace */                                   \
    C(me_stalled_evicted, CL1("reason", "stalled"), CJ_NONE, CLOG(ME, 13, "stalled_evicted"))      \
    F("me_link_pauses_total", COUNTER,                                                             \
      "Times an ME link stopped being read (me-link-buffer reached).")                             \
    C(me_link_pauses, CL0, CJ_NONE, CLOG(ME, 6, "link_pauses"))                                    \
    F("me_messages_total", COUNTER,                                                                \
      "RPC messages: requests sent, answers, acks and pings handled, messages for unknown "        \
      "connections.")                                                                              \
    C(me_requests, CL1("type", "request"), CJ_NONE, CLOG(ME, 7, "requests")) /* RPC_PROXY_REQ */   \
    C(me_answers, CL1("type", "answer"), CJ_NONE, CLOG(ME, 8, "answers")) /* RPC_PROXY_ANS */      \
    C(me_acks, CL1("type", "ack"), CJ_NONE, CLOG(ME, 9, "acks")) /* RPC_SIMPLE_ACK */              \
    /* RPC_PING answered; then messages for a connection id we no longer know */                   \
    C(me_pings, CL1("type", "ping"), CJ_NONE, CLOG(ME, 10, "pings"))                               \
    C(me_unknown, CL1("type", "unknown"), CJ_NONE, CLOG(ME, 11, "unknown"))                        \
    /* the relay */                                                                                \
    F("relay_reads_total", COUNTER, "Relay read/splice calls.")                                    \
    /* relay read(2)/readv(2)/splice(2) calls, then write(2)/writev(2)/splice(2) */                \
    C(reads, CL0, CJ_NONE, CLOG(MAIN, 7, "reads"))                                                 \
    F("relay_writes_total", COUNTER, "Relay write calls.")                                         \
    C(writes, CL0, CJ_NONE, CLOG(MAIN, 8, "writes"))                                               \
    F("spliced_bytes_total", COUNTER, "Bytes moved by splice(2).")                                 \
    C(spliced, CL0, CJ_NONE, CLOG(MAIN, 9, "spliced"))                                             \
    F("block_waits_total", COUNTER, "Times a connection waited for a buffer block.")               \
    C(block_waits, CL0, CJ_NONE, CLOG(MAIN, 11, "block_waits"))                                    \
    F("pipe_full_total", COUNTER, "Times splice found its pipe full.")                             \
    C(pipe_full, CL0, CJ_NONE, CLOG(MAIN, 10, "pipe_full")) /* reading paused */                   \
    /* relay reads that filled more than one block (readv) */                                      \
    C(wide_reads, CL_NONE, CJ_NONE, CLOG(RELAY, 1, "wide_reads"))                                  \
    /* idle connections whose cipher contexts were handed back */                                  \
    C(ctr_parked, CL_NONE, CJ_NONE, CLOG(RELAY, 0, "ctr_parked"))                                  \
    H(RESOURCES) /* arenas, pipes, replay cache, per worker, the metrics server */                 \
    A(closed, [CR_COUNT]) /* by close reason (enum conn_reason) */                                 \
    A(kind_total, [CK_COUNT])         /* connections that turned out to be each kind */            \
    A(kind_active, [CK_COUNT])        /* of those, open now */                                     \
    A(dc_bytes, [CONN_DC_SLOTS][2])   /* [0] client->DC, [1] DC->client */

/* The SIGUSR1 lines made from the table's CLOG column (main.c adds what is not a counter). */
enum counters_log { COUNTERS_LOG_MAIN, COUNTERS_LOG_LIMITS, COUNTERS_LOG_RELAY, COUNTERS_LOG_TLS,
                    COUNTERS_LOG_ACCESS, COUNTERS_LOG_ME, COUNTERS_LOG_COUNT };

/* The H rows, in table order. */
#define COUNTERS_NONE_F(m, t, h)
#define COUNTERS_NONE_C(f, s, j, l)
#define COUNTERS_NONE_V(x, s)
#define COUNTERS_NONE_A(f, d)
#define COUNTERS_NONE_H(id)
#define COUNTERS_HAND_ID(id) CH_##id,
enum counters_hand {
    PROXY_COUNTERS(COUNTERS_NONE_F, COUNTERS_NONE_C, COUNTERS_NONE_V, COUNTERS_NONE_A,
                   COUNTERS_HAND_ID) CH_COUNT
};

/* The fields of struct proxy_stats (conn.h), where CR_COUNT, CK_COUNT and CONN_DC_SLOTS are
 * known: every counter is a stat_t. */
#define COUNTERS_FIELD_C(f, s, j, l) stat_t f;
#define COUNTERS_FIELD_A(f, d) stat_t f d;
#define PROXY_STATS_FIELDS                                                                         \
    PROXY_COUNTERS(COUNTERS_NONE_F, COUNTERS_FIELD_C, COUNTERS_NONE_V, COUNTERS_FIELD_A,           \
                   COUNTERS_NONE_H)

/* One row of the table as data (counters_rows), for code that walks it. */
enum counters_row_kind { CROW_FAMILY, CROW_COUNTER, CROW_VIEW, CROW_ARRAY, CROW_HAND };

struct counters_row {
    enum counters_row_kind kind;
    const char *name;            /* FAMILY: the metric; COUNTER, ARRAY: the field */
    const char *type, *help;     /* FAMILY: "counter" or "gauge", HELP text */
    int sample;                  /* COUNTER, VIEW: a sample of the family above */
    const char *k1, *v1, *k2, *v2; /* its labels (NULL: fewer) */
    size_t off;                  /* COUNTER, VIEW, ARRAY: where in struct proxy_stats */
    const char *json;            /* COUNTER: its /stats summary key (NULL: none) */
    int json_pos;
    const char *log;             /* COUNTER: its SIGUSR1 label (NULL: none) */
    int log_line, log_pos;
    enum counters_hand hand;     /* HAND */
};

/* The column values of C and V rows (see the table). */
#define CL_NONE .sample = 0
#define CL0 .sample = 1
#define CL1(k, v) .sample = 1, .k1 = k, .v1 = v
#define CL2(k, v, k2_, v2_) .sample = 1, .k1 = k, .v1 = v, .k2 = k2_, .v2 = v2_
#define CJ_NONE .json = NULL
#define CJ(pos, key) .json = key, .json_pos = pos
#define CLOG_NONE .log = NULL
#define CLOG(line, pos, label) .log = label, .log_line = COUNTERS_LOG_##line, .log_pos = pos

extern const struct counters_row counters_rows[];
extern const size_t counters_nrows;

struct proxy_stats;
struct sbuf;

/* Adds the counters of src into dst (relaxed reads of another thread's counters). */
void proxy_stats_add(struct proxy_stats *dst, const struct proxy_stats *src);

/* The value of a COUNTER or VIEW row r in s. */
uint64_t counters_get(const struct proxy_stats *s, const struct counters_row *r);

/* Writes SIGUSR1 line `line`'s counters of s into buf as " label N" each, in their order;
 * always NUL-terminated (cut short if buf is). Returns buf. */
char *counters_log_line(const struct proxy_stats *s, enum counters_log line, char *buf,
                        size_t len);

/* Appends /stats's "summary" object of s ({"accepted":N,...}) to out. */
void counters_json_summary(const struct proxy_stats *s, struct sbuf *out);

/* The DC pool's counters (struct dcpool_stats): field, /metrics event label. The SIGUSR1 line
 * names them by field. */
#define DCPOOL_COUNTERS(X)                                                                         \
    X(connects, "connect") X(claims, "claim") X(dropped, "drop") X(failures, "failure")            \
    X(recycled, "recycle")
#define COUNTERS_ONE(...) +1
#define DCPOOL_NCOUNTERS (0 DCPOOL_COUNTERS(COUNTERS_ONE))

#endif
