/* fuzz_meconf.c: libFuzzer target for the proxy config parser (rpc_config_parse). */
#include "proto/rpc.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: a proxy-config file. It parses or gives one "name:..." error; a parsed config has
 * between 1 and RPC_CONFIG_MAX entries, each with a non-zero dc and port. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rpc_config c;
    char *buf = malloc(size ? size : 1);
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    char err[256] = "";
    if (rpc_config_parse("f", buf, size, &c, err, sizeof err) == 0) {
        FUZZ_CHECK(c.n >= 1 && c.n <= RPC_CONFIG_MAX);
        for (int i = 0; i < c.n; i++)
            FUZZ_CHECK(c.e[i].dc != 0 && c.e[i].port != 0);
    } else {
        FUZZ_CHECK(strncmp(err, "f:", 2) == 0);
    }
    free(buf);
    return 0;
}
