/* log.h: leveled, thread-safe logging to stderr, a file (reopened on SIGHUP) or syslog. */
#ifndef MTPROXY_CORE_LOG_H
#define MTPROXY_CORE_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

/* Parses "error|warn|info|debug". Returns the level, or -1. */
int log_level_parse(const char *s);

/* Opens the log target: "stderr", "syslog" or a file path (appended). Thread-unsafe: call
 * before workers start. Returns 0, or -1 with a message in err. */
int log_open(const char *target, enum log_level level, char *err, size_t errlen);

/* Reopens a file target (for log rotation; SIGHUP). No-op for stderr/syslog. Returns 0, or
 * -1 with err (the old file stays the target). */
int log_reopen(char *err, size_t errlen);

/* Changes the least severe level logged (reload; any thread may be logging). */
void log_set_level(enum log_level level);

/* Closes the target. */
void log_close(void);

/* 1 if a message at this level would be written. */
int log_enabled(enum log_level level);

/* Writes one line (a trailing newline is added) with time and level, as one write(2). */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level level, const char *fmt, va_list ap);

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)                                                                         \
    do {                                                                                       \
        if (log_enabled(LOG_LVL_DEBUG))                                                        \
            log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                                               \
    } while (0)

#endif
