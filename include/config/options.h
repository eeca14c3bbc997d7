/* options.h: the mtproxy configuration: one table of every key, its default and its help. */
#ifndef MTPROXY_PROXY_OPTIONS_H
#define MTPROXY_PROXY_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "core/cidr.h"
#include "core/config.h"
#include "core/sock.h"
#include "proto/secret.h"
#include "proto/socks5.h"
#include "users/rstore.h"
#include "users/users.h"

#define OPT_MAX_LISTEN 16
#define OPT_MAX_SECRETS 100000 /* users (secrets); storage grows with those configured */
#define OPT_MAX_DC_ADDRS 128
#define OPT_PATH_MAX 1024
#define OPT_MAX_ACL 256      /* allow/deny lines in the config; longer lists go in files */
#define OPT_MAX_ACL_FILES 8
#define OPT_MAX_NAT 8

/* `nat-info = PRIVATE:PUBLIC`: a local address and the public one the MEs see for it. */
struct opt_nat {
    int v6;
    unsigned char priv[16], pub[16]; /* network order; IPv4 in [0..4) */
};

/* One configured DC address (`dc = ID ADDRESS:PORT`); several per id are tried in order. */
struct opt_dc {
    int id;
    struct sock_addr addr;
};

enum opt_dc_family { OPT_DC_ANY = 0 };

/* unknown-sni: what a hello naming none of our domains gets. */
enum opt_unknown_sni { SNI_MASK = 0, SNI_DROP = 1, SNI_REJECT = 2 };

/* rst-on-close: which client connections end with a reset. */
enum opt_rst { RST_OFF = 0, RST_PROBES = 1, RST_ALWAYS = 2 };

/* removed-user: what a reload that removes a user does to its live connections. */
enum opt_removed_user { REMOVED_CLOSE = 0, REMOVED_DRAIN = 1 };

/* Everything the proxy is configured with. Immutable once workers start; a reload builds a
 * new one and swaps the pointer (later issue). */
/* How a write-batch window holds writes (see write-batch-mode). */
enum write_batch_mode {
    WB_BUFFER = 0, /* in user space, one writev when the window closes (TCP_NODELAY) */
    WB_CORK = 1,   /* written at once into a TCP_CORK'ed socket, uncorked when it closes */
    WB_MORE = 2,   /* written at once with MSG_MORE, pushed (TCP_NODELAY) when it closes */
};

struct options {
    struct sock_addr listen[OPT_MAX_LISTEN];
    int nlisten;
    struct secret *secrets; /* heap, grown as secrets are parsed (options_free) */
    int nsecrets, secrets_cap;
    uint32_t *secret_slots; /* name -> index + 1, open addressing (duplicate names) */
    size_t nsecret_slots;
    struct user_limit *limits; /* `limit` lines (heap), by user name */
    int nlimits, limits_cap;
    unsigned ips_window_ms;
    int quota_reset_day;    /* day of the month (1-28) quota=SIZE/month starts over */
    int removed_user;           /* enum opt_removed_user */
    unsigned drain_timeout_ms;  /* removed-user = drain: live connections closed after it */
    unsigned accept_rate;   /* new connections per second per source address (0 = off) */
    int max_handshakes;     /* connections not past their handshake, whole process (0 = off) */
    int log_connections;    /* one info line per closed client connection */
    struct opt_dc dcs[OPT_MAX_DC_ADDRS];
    int ndcs;
    int dc_builtin;
    int default_dc;
    int prefer_ipv6;
    int only_ipv4;
    int fast_mode;
    int allow_plain, allow_dd, allow_ee; /* client kinds served */
    int mask;                 /* front non-clients to the real site (else hold silently) */
    char mask_host[256];      /* "" = the ee secret's domain */
    int mask_port;
    int mask_proxy_protocol;  /* 0 off, 1 v1, 2 v2 */
    unsigned tls_time_skew_ms;
    int tls_ignore_time;
    int tls_sni_check;
    int tls_ext_order;        /* enum faketls_ext_order */
    int tls_appdata_min, tls_appdata_max;
    int tls_profile;          /* learn the site's first flight (else the two keys above) */
    unsigned tls_profile_refresh_ms;
    unsigned tls_profile_idle_ms;  /* the idle probe waits at most this long */
    int tls_profile_vary;
    int unknown_sni;          /* enum opt_unknown_sni */
    int record_sizing;
    int client_mss;           /* 0 = kernel default */
    int rst_on_close;         /* enum opt_rst */
    size_t replay_cache;      /* bytes; 0 = off */
    int splice;
    int splice_tls;
    int dc_pool;

    /* Middle-proxy mode (ad-tag given): clients reach Telegram through its middle proxies. */
    int middle;
    unsigned char ad_tag[16];
    char proxy_secret_file[OPT_PATH_MAX];
    char proxy_config_file[OPT_PATH_MAX];
    struct opt_nat nat[OPT_MAX_NAT];
    int nnat;
    int me_pool;               /* links per ME address per worker */
    size_t me_client_buffer;   /* bytes queued toward one client: past it that client closes */
    size_t me_request_buffer;  /* bytes of one client queued toward the ME: past it, not read */
    size_t me_link_buffer;     /* bytes read from a link not yet delivered: past it, not read */
    unsigned me_ping_ms;       /* a quiet link is pinged after this; quiet twice: dead */
    unsigned me_stall_grace_ms; /* a link paused this long closes the clients holding it */
    unsigned write_batch_ms;
    int write_batch_mode; /* enum write_batch_mode */
    int buffers; /* 0 pooled, 1 per-connection */

    int workers; /* 0 = one per core */
    int busy_poll_us; /* busy-poll: microseconds a worker spins before sleeping (0 = off) */
    char public_host[256];
    int public_port; /* 0 = the first listen port */

    size_t block_size;
    size_t max_buffer;    /* per direction per connection */
    size_t buffer_memory; /* cap on relay blocks for the whole process (0 = no cap) */
    int max_connections;  /* whole process; split evenly between workers */
    int backlog;

    unsigned handshake_timeout_ms;
    unsigned probe_wait_ms;
    size_t mask_buffer_memory; /* arena blocks for fronted connections (process-wide) */
    unsigned mask_lifetime_ms, mask_idle_ms;
    int probe_limit_per_ip;
    unsigned connect_timeout_ms;
    unsigned idle_timeout_ms;
    unsigned tcp_keepalive_ms;
    size_t sndbuf, rcvbuf;
    int tcp_nodelay;

    int log_level;
    char log[OPT_PATH_MAX];
    char user[64];
    char pidfile[OPT_PATH_MAX];
    int daemonize;
    char state_file[OPT_PATH_MAX];
    char links_file[OPT_PATH_MAX]; /* "" = state_file + ".links", "off" = none */

    /* The metrics server (metrics = ADDR:PORT): /metrics, /stats, the status page. */
    int metrics_on;
    struct sock_addr metrics_addr;
    char metrics_token[256];
    int metrics_public;       /* metrics-public: a non-loopback address without a token is meant */

    /* users-file = PATH: more `secret` and `limit` lines, rewritten by the management API. */
    char users_file[OPT_PATH_MAX];
    /* The management API (api = ADDR:PORT, served by the metrics server's thread). */
    int api_on;
    struct sock_addr api_addr;
    char api_token[256];

    /* Access list (checked at accept, before any byte is read): deny wins; with any allow
     * entry only allowed sources are served. Files are read at start (and on reload). */
    struct cidr allow[OPT_MAX_ACL], deny[OPT_MAX_ACL];
    int nallow, ndeny;
    char allow_files[OPT_MAX_ACL_FILES][OPT_PATH_MAX], deny_files[OPT_MAX_ACL_FILES][OPT_PATH_MAX];
    int nallow_files, ndeny_files;

    /* PROXY protocol from a balancer in front: every client connection starts with a v1 or
     * v2 header whose source address is the client's (for the access list, logs, fronting). */
    int proxy_protocol;
    struct cidr pp_from[OPT_MAX_ACL];
    int npp_from;

    /* Upstream through a SOCKS5 server (socks5 = URL): DCs always, fronting if socks5_mask. */
    struct socks5_server socks5;
    int socks5_on;
    int socks5_mask;
    struct sock_addr socks5_addr; /* resolved by options_resolve_socks5 at start */

    /* The fleet's replay store (replay-store = redis://...): every instance refuses a
     * handshake any instance has seen. */
    struct rstore_config rstore;
    int rstore_fail_closed;
    unsigned rstore_timeout_ms;
    unsigned rstore_ttl_ms; /* plain/dd headers (FakeTLS hellos: 2 x tls-time-skew) */

    /* Per-user limits shared by the fleet (limits-store = redis://..., proxy/lstore.h). */
    struct rstore_config lstore;
    int lstore_fail_closed;
    unsigned lstore_interval_ms;

    /* listen-prefix: every address of an IPv6 prefix, one per user (proxy/prefix.h). */
    int prefix_on;
    struct in6_addr prefix;    /* host bits zero */
    int prefix_len;            /* 1..120 */
    int prefix_port;
    char prefix_key[80];       /* listen-prefix-key (hex), "" = from STATE-FILE.addresses */
    unsigned prefix_grace_ms;  /* a rotated-away address keeps serving this long */
    struct in6_addr *user_addr; /* per secret index, that user's address (reload_build sets
                                 * it with listen-prefix; heap, options_free); else NULL */

    /* WEB proxy mode (docs/web.md): plain HTTP/1.1 behind the operator's TLS terminator. */
    int web_on;                  /* web-listen set */
    struct sock_addr web_addr;
    int web_public;              /* web-public: a public web-listen address is meant */
    int web_instance;            /* web-instance: this instance's id in the fleet (0..63) */
    char web_host[256];          /* the host name the capabilities are derived for */
    char web_root[OPT_PATH_MAX]; /* the ordinary site's files ("" = the built-in page) */
    int web_upstream_on;         /* web-upstream: the ordinary site from an HTTP server */
    struct sock_addr web_upstream;
    int web_carrier;             /* enum opt_web_carrier */
    struct cidr web_trusted[OPT_MAX_ACL]; /* web-trusted-proxies */
    int nweb_trusted;
    /* The WEB session table's limits (docs/web.md 7; web/weblimits.c has the same defaults) */
    int web_sessions, web_streams, web_streams_per_session, web_bootstraps;
    size_t web_pending_session, web_pending_process, web_body_max;
    int web_session_rate, web_stream_rate, web_bootstrap_rate; /* per minute */
    unsigned web_bootstrap_ttl_ms, web_grace_ms, web_poll_ms;
};

/* web-carrier: the carrier every WEB session gets (X-Carrier-Mode; websess_mode's order). */
enum opt_web_carrier { WEB_HTTPS = 0, WEB_HTTPS_LANES, WEB_WEBSOCKET, WEB_WEBSOCKET_LANES };

/* The option table (options_table.c; also drives --help and the documented mtproxy.conf). */
extern const struct config_option options_table[];
extern const size_t options_count;

/* Starts a parse session with every default applied. o must be zeroed (static) or have
 * been set up by options_init before (what it holds on the heap is freed first). */
int options_init(struct config_parser *p, struct options *o);

/* Frees what o holds on the heap (the secrets); o may be set up again with options_init. */
void options_free(struct options *o);

/* Cross-key checks after all sources are applied (e.g. max-buffer >= block-size); adds
 * errors to p. Returns the number of errors added. */
int options_validate(struct config_parser *p, struct options *o);

/* The checks of the WEB keys (options_validate's part): web-host with web-listen, a carrier
 * that is supported, a private address unless web-public. Returns the number of errors added. */
int options_validate_web(struct config_parser *p, struct options *o);

/* Resolves the socks5 server's host (blocking; start-up and --check-config only). Returns 0
 * (also when socks5 is unset), or -1 with err. */
int options_resolve_socks5(struct options *o, char *err, size_t errlen);

/* Appends secret s (its name must be new). Returns 0, or -1 with err. */
int options_add_secret(struct options *o, const struct secret *s, char *err, size_t errlen);

/* The index of the secret named name, or -1. */
int options_find_secret(const struct options *o, const char *name);

/* The `secret` key's parser and reset (the option table's and the state file's): parses
 * NAME:SECRET (secret_parse_named) and appends it to conf, a struct options, as
 * options_add_secret does (0, or -1 with err); the reset forgets every secret so far. */
int options_parse_secret(void *conf, const char *v, char *err, size_t errlen);
void options_reset_secret(void *conf);

/* 1 if s's key is one shown in mtproxy's documentation (refused by options_validate). */
int options_documented_secret(const struct secret *s);

/* Loads secrets from a state file written by options_save_state (same `secret = NAME:HEX`
 * syntax as the config). Returns 1 if loaded, 0 if the file does not exist, -1 on error
 * (message in err). */
int options_load_state(struct options *o, const char *path, char *err, size_t errlen);

/* Writes secret s (NULL: none) and then extra (NULL: nothing; lines like `quota-used = NAME
 * BYTES`) to path atomically (mode 0600). Returns 0, or -1 with err. */
int options_save_state_text(const struct secret *s, const char *extra, const char *path,
                            char *err, size_t errlen);

/* Loads users-file text (name: its path, for errors as NAME:LINE) into o: `secret` and
 * `limit` lines only (any other key is an error), appended to what o holds; blank lines and
 * comments as in the config. Errors go to errs. Returns the number of errors added. */
int options_load_users(struct options *o, const char *name, const char *data, size_t len,
                       struct config_errors *errs);

/* Reads users-file path (a missing file is an empty one) and loads it as options_load_users
 * does. Returns the number of errors added. */
int options_load_users_file(struct options *o, const char *path, struct config_errors *errs);

/* Writes secret s to path atomically (mode 0600). Returns 0, or -1 with err. */
int options_save_state(const struct secret *s, const char *path, char *err, size_t errlen);

/* The host put in links for opt (public-host, else the listen address, else the host
 * name) into host, and returns the port (public-port, else the first listen port). */
int options_link_host(const struct options *opt, char *host, size_t hostlen);

#endif
