/* fuzz_config.c: libFuzzer target for the config file parser (config_load_buffer + options). */
#include "fuzz_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct options o;
    static struct config_parser p;
    FUZZ_CHECK(options_init(&p, &o) == 0); /* every default must parse */

    /* An exact-size heap copy, not NUL-terminated: the parser must stay inside len. */
    char *buf = malloc(size ? size : 1);
    FUZZ_CHECK(buf);
    if (size)
        memcpy(buf, data, size);
    int n = config_load_buffer(&p, "fuzz.conf", buf, size);
    free(buf);

    FUZZ_CHECK(n == p.errors.count);
    fuzz_check_errors(&p, 0, "fuzz.conf:"); /* every file error names the file and line */
    fuzz_check_options(&o);

    int before = p.errors.count;
    int v = options_validate(&p, &o);
    FUZZ_CHECK(v == p.errors.count - before);
    fuzz_check_errors(&p, before, NULL);
    if (p.errors.count == 0)
        fuzz_check_dc_table(&o);
    return 0;
}
