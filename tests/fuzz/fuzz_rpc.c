/* fuzz_rpc.c: libFuzzer target for the ME link parsers: frames, RPC messages, PROXY_REQ. */
#include "proto/rpc.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: bytes an ME (or a man in the middle) could send. Frames are parsed one after another
 * as the link reads them; each payload goes through the message and PROXY_REQ parsers. A
 * frame that parses must parse the same from a copy of exactly its bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees any over-read */
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    size_t off = 0;
    int32_t seq = 0;
    while (off < size) {
        struct rpc_frame f;
        size_t need = 0;
        const char *why = NULL;
        enum rpc_status st = rpc_frame_parse(buf + off, size - off, seq, &f, &need, &why);
        if (st == RPC_NEED_MORE) {
            FUZZ_CHECK(need > size - off);
            break;
        }
        if (st == RPC_BAD) {
            FUZZ_CHECK(why != NULL);
            break;
        }
        FUZZ_CHECK(f.total >= 4 && f.total <= size - off);
        if (f.payload) {
            FUZZ_CHECK(f.len + RPC_FRAME_OVERHEAD == f.total);
            struct rpc_msg m;
            if (rpc_msg_parse(f.payload, f.len, &m) == RPC_OK && m.type == RPC_PROXY_ANS)
                FUZZ_CHECK(m.data + m.len == f.payload + f.len);
            struct rpc_proxy_req r;
            if (rpc_proxy_req_parse(f.payload, f.len, &r) == RPC_OK)
                FUZZ_CHECK(r.data >= f.payload && r.data + r.len == f.payload + f.len);
            seq++;
        }
        off += f.total;
    }
    /* the same bytes as single messages */
    struct rpc_msg m;
    (void)rpc_msg_parse(buf, size, &m);
    struct rpc_nonce n;
    (void)rpc_nonce_parse(buf, size, &n);
    free(buf);
    return 0;
}
