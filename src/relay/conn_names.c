/* conn_names.c: names of close reasons, kinds, states, DC slots, and the counters they index. */
#include "conn/conn_int.h"

static const char *const reason_names[CR_COUNT] = {
    [CR_DONE] = "done",
    [CR_CLIENT_CLOSED] = "client-closed",
    [CR_DC_CLOSED] = "dc-closed",
    [CR_CLIENT_EARLY_EOF] = "client-early-eof",
    [CR_HANDSHAKE_TIMEOUT] = "handshake-timeout",
    [CR_BAD_HEADER] = "bad-header",
    [CR_DC_UNREACHABLE] = "dc-unreachable",
    [CR_IDLE] = "idle-timeout",
    [CR_NO_MEMORY] = "no-memory",
    [CR_CLIENT_PROTOCOL] = "client-protocol-error",
    [CR_MASK_UNREACHABLE] = "mask-unreachable",
    [CR_SHUTDOWN] = "shutdown",
    [CR_REFUSED] = "refused",
    [CR_ME_LINK] = "me-link-lost",
    [CR_SLOW] = "slow-client",
    [CR_LIMIT] = "user-limit",
    [CR_USER_REMOVED] = "user-removed",
    [CR_HANDSHAKE_CAP] = "handshake-cap",
    [CR_ACCEPT_RATE] = "accept-rate",
    [CR_UNKNOWN_SNI] = "unknown-sni",
    [CR_DRAINED] = "drained",
};

const char *conn_reason_name(enum conn_reason r)
{
    if ((int)r < 0 || r >= CR_COUNT)
        return "none";
    return r < CR_COUNT ? reason_names[r] : "?";
}

const char *conn_kind_name(enum conn_kind k)
{
    static const char *const names[CK_COUNT] = {"none", "obfs2", "dd", "tls", "fronted"};
    return k < CK_COUNT ? names[k] : "?";
}

int conn_dc_slot(int id)
{
    if (id >= 1 && id <= 5)
        return id - 1;
    if (id <= -1 && id >= -5)
        return 4 - id;
    return id == 203 ? 10 : 11;
}

const char *conn_dc_slot_name(int slot)
{
    static const char *const names[CONN_DC_SLOTS] = {"1",  "2",  "3",  "4",   "5",    "-1",
                                                     "-2", "-3", "-4", "-5", "203", "other"};
    return slot >= 0 && slot < CONN_DC_SLOTS ? names[slot] : "other";
}

/* c is now known to be kind k: counted in total and while open. */
void conn_set_kind(struct conn *c, enum conn_kind k)
{
    struct proxy_stats *st = &c->pw->stats;
    if (c->kind)
        STAT_DEC(&st->kind_active[c->kind]);
    c->kind = (uint8_t)k;
    STAT_INC(&st->kind_total[k]);
    STAT_INC(&st->kind_active[k]);
}

void conn_byte_counters(struct conn *c, int down, stat_t *out[3])
{
    struct proxy_stats *st = &c->pw->stats;
    out[0] = down ? &st->bytes_down : &st->bytes_up;
    out[1] = c->us ? (down ? &c->us->bytes_down : &c->us->bytes_up) : NULL;
    out[2] = c->mode == CONN_MODE_MTPROTO ? &st->dc_bytes[conn_dc_slot(c->dc_resolved)][down]
                                          : NULL;
}
static const char *const state_names[] = {
    [CS_FREE] = "free",           [CS_HEADER] = "header",       [CS_TLS_HELLO] = "tls-hello",
    [CS_TLS_HEADER] = "tls-header", [CS_CONNECTING] = "connecting", [CS_RELAY] = "relay",
    [CS_HOLD] = "hold",           [CS_PROXY_HDR] = "proxy-header", [CS_STORE_WAIT] = "store-wait",
};

const char *conn_state_name(enum conn_state s)
{
    return (unsigned)s < sizeof state_names / sizeof *state_names && state_names[s]
               ? state_names[s]
               : "?";
}
