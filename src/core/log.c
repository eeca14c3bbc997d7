/* log.c: leveled logging; one write(2) per line so lines from workers never interleave. */
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* The log target is process state set up once by main before threads start, like stderr. */
static struct {
    int fd;
    int use_syslog;
    enum log_level level;
    char path[4096];
} g_log = {STDERR_FILENO, 0, LOG_LVL_INFO, ""};

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

int log_open(const char *target, enum log_level level, char *err, size_t errlen)
{
    g_log.level = level;
    if (!target || !*target || strcmp(target, "stderr") == 0) {
        g_log.fd = STDERR_FILENO;
        return 0;
    }
    if (strcmp(target, "syslog") == 0) {
        openlog("mtproxy", LOG_PID | LOG_NDELAY, LOG_DAEMON);
        g_log.use_syslog = 1;
        return 0;
    }
    int fd = open(target, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open log file %s: %s", target, strerror(errno));
        return -1;
    }
    snprintf(g_log.path, sizeof g_log.path, "%s", target);
    g_log.fd = fd;
    return 0;
}

int log_reopen(char *err, size_t errlen)
{
    if (!g_log.path[0])
        return 0;
    int fd = open(g_log.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "cannot reopen log file %s: %s (still writing to the old one)",
                 g_log.path, strerror(errno));
        return -1;
    }
    /* dup2 swaps the target atomically for threads that are writing right now. */
    dup2(fd, g_log.fd);
    close(fd);
    return 0;
}

void log_set_level(enum log_level level)
{
    __atomic_store_n(&g_log.level, level, __ATOMIC_RELAXED);
}

void log_close(void)
{
    if (g_log.use_syslog)
        closelog();
    else if (g_log.fd != STDERR_FILENO)
        close(g_log.fd);
    g_log.fd = STDERR_FILENO;
    g_log.use_syslog = 0;
    g_log.path[0] = 0;
}

int log_enabled(enum log_level level)
{
    return level <= __atomic_load_n(&g_log.level, __ATOMIC_RELAXED);
}

void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
    if (level > __atomic_load_n(&g_log.level, __ATOMIC_RELAXED))
        return;
    char line[1024];
    if (g_log.use_syslog) {
        static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
        vsnprintf(line, sizeof line, fmt, ap);
        syslog(prio[level], "%s", line);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level]);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(g_log.fd, line, len);
    (void)w;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}
