/* fuzz_args.c: libFuzzer target for command-line options (config_load_args over the table). */
#include "fuzz_options.h"

#define FUZZ_MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input is argv: arguments separated by NUL bytes (each one copied to its own exact-size
 * heap block so that an over-read is caught). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct options o;
    static struct config_parser p;
    FUZZ_CHECK(options_init(&p, &o) == 0);

    char *argv[FUZZ_MAX_ARGS + 1];
    int argc = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < FUZZ_MAX_ARGS; i++) {
        if (i == size || data[i] == 0) {
            if (i == size && i == start && argc > 0)
                break; /* a trailing NUL does not start an empty argument */
            argv[argc++] = fuzz_cstr(data + start, i - start);
            start = i + 1;
        }
    }
    argv[argc] = NULL;

    int n = config_load_args(&p, argc, argv);
    FUZZ_CHECK(n == p.errors.count);
    /* every error names the argument: "--key: ..." or "'arg': expected --key value" */
    for (int i = 0; i < p.errors.count && i < CONFIG_MAX_ERRORS; i++)
        FUZZ_CHECK(p.errors.msg[i][0] == '-' || p.errors.msg[i][0] == '\'');
    fuzz_check_errors(&p, 0, NULL);
    fuzz_check_options(&o);

    int before = p.errors.count;
    FUZZ_CHECK(options_validate(&p, &o) == p.errors.count - before);
    if (p.errors.count == 0)
        fuzz_check_dc_table(&o);

    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return 0;
}
