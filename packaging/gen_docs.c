/* gen_docs.c: writes mtproxy.8, mtproxy.conf.5 and the documented mtproxy.conf from options_table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "config/options.h"

#ifndef MTPROXY_VERSION
#define MTPROXY_VERSION "unknown"
#endif

#define CONF_WIDTH 78

/* A heading printed before the option of that name (skipped if the option is gone). */
struct section {
    const char *first;
    const char *title;
};

static const struct section sections[] = {
    {"listen", "Clients: where to listen, which secrets to accept"},
    {"dc", "Telegram data centres"},
    {"allow-plain", "Client kinds, FakeTLS and fronting"},
    {"fast-mode", "Relay"},
    {"workers", "Workers and the printed links"},
    {"block-size", "Memory and connection limits"},
    {"handshake-timeout", "Timeouts and socket options"},
    {"log-level", "Logging and process"},
};

/* Commented example lines shown in mtproxy.conf (and the man pages) after a key. None of
 * them is usable as is: secrets are placeholders, addresses are documentation ranges. */
struct example {
    const char *name;
    const char *lines[4];
};

static const struct example examples[] = {
    {"listen", {"[::]:8443"}},
    {"secret", {"alice:<output of: mtproxy generate-secret>",
                "bob:<output of: mtproxy generate-secret --dd>",
                "carol:<output of: mtproxy generate-secret --tls www.example.com>"}},
    {"dc", {"2 203.0.113.10:443", "-4 [2001:db8::10]:443", "203 198.51.100.20:443"}},
    {"public-host", {"proxy.example.org"}},
    {"user", {"nobody"}},
    {"pidfile", {"/run/mtproxy.pid"}},
    {"users-file", {"/etc/mtproxy/users.conf"}},
    {"api", {"127.0.0.1:9101"}},
    {"api-token", {"<a long random string, e.g. from: head -c 24 /dev/urandom | base64>"}},
};

static const char *section_title(const char *name)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        if (strcmp(sections[i].first, name) == 0)
            return sections[i].title;
    return NULL;
}

static const struct example *example_for(const char *name)
{
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++)
        if (strcmp(examples[i].name, name) == 0)
            return &examples[i];
    return NULL;
}

static int has_default(const struct config_option *o)
{
    return o->def && *o->def;
}

/* Options without a table default whose help already explains the default get no
 * "Default: none." line. */
static int help_has_default(const struct config_option *o)
{
    return o->help && strstr(o->help, "Default:") != NULL;
}

/* The argument as written in the config file: the CLI form may carry shell quotes. */
static void conf_arg(const struct config_option *o, char *buf, size_t len)
{
    const char *a = o->arg ? o->arg : "VALUE";
    size_t n = strlen(a);
    if (n >= 2 && a[0] == '\'' && a[n - 1] == '\'')
        snprintf(buf, len, "%.*s", (int)(n - 2), a + 1);
    else
        snprintf(buf, len, "%s", a);
}

/* Writes text word-wrapped to width, each line starting with prefix. */
static void wrap(FILE *f, const char *prefix, const char *text, int width)
{
    int plen = (int)strlen(prefix), col = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *w = p;
        while (*p && *p != ' ')
            p++;
        int wl = (int)(p - w);
        if (col && col + 1 + wl > width) {
            fputc('\n', f);
            col = 0;
        }
        if (!col) {
            fputs(prefix, f);
            col = plen;
        } else {
            fputc(' ', f);
            col++;
        }
        fwrite(w, 1, (size_t)wl, f);
        col += wl;
    }
    if (col)
        fputc('\n', f);
}

/* Writes s as roff text: backslashes and hyphens escaped, control characters at a line
 * start neutralised. */
static void roff(FILE *f, const char *s)
{
    int bol = 1;
    for (; *s; s++) {
        if (bol && (*s == '.' || *s == '\''))
            fputs("\\&", f);
        bol = *s == '\n';
        if (*s == '\\')
            fputs("\\e", f);
        else if (*s == '-')
            fputs("\\-", f);
        else
            fputc(*s, f);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* mtproxy.conf */

static void write_conf(FILE *f)
{
    fputs("# mtproxy.conf: configuration of mtproxy, an MTProto proxy for Telegram.\n"
          "#\n", f);
    wrap(f, "# ",
         "Generated from the option table (src/config/options_table.c) by packaging/gen_docs.c, "
         "like mtproxy.conf(5), mtproxy(8) and `mtproxy --help`: to change this text, change "
         "the table and run `cmake --build BUILD --target update-docs`.", CONF_WIDTH);
    fputs("#\n", f);
    wrap(f, "# ",
         "Syntax: one `key = value` per line. `#` starts a comment at the start of a line or "
         "after white space. A value may be put in double quotes. A key marked (repeatable) "
         "may be given several times. Every key can also be given on the command line as "
         "`--key value`, which wins over this file (a repeatable key given there replaces "
         "this file's lines for it).", CONF_WIDTH);
    fputs("#\n", f);
    wrap(f, "# ",
         "Values: on|off (also yes/no, true/false, 1/0); sizes in bytes with an optional k, M "
         "or G suffix (binary multiples: 16k = 16384); durations with an ms, s, m or h suffix "
         "(a bare number is seconds).", CONF_WIDTH);
    fputs("#\n", f);
    wrap(f, "# ",
         "Every setting below is commented out and shows its default: uncomment a line to "
         "change it. This file holds no secret: with none configured, mtproxy generates one "
         "at first start, keeps it in state-file and prints the tg:// and t.me links for it. "
         "Check a change with: mtproxy --check-config --config FILE", CONF_WIDTH);

    for (size_t i = 0; i < options_count; i++) {
        const struct config_option *o = &options_table[i];
        const char *title = section_title(o->name);
        if (title) {
            fputs("\n# ", f);
            for (int c = 2; c < CONF_WIDTH; c++)
                fputc('=', f);
            fprintf(f, "\n# %s\n# ", title);
            for (int c = 2; c < CONF_WIDTH; c++)
                fputc('=', f);
            fputc('\n', f);
        }
        char arg[128];
        conf_arg(o, arg, sizeof arg);
        fprintf(f, "\n# %s = %s%s\n", o->name, arg,
                (o->flags & CFG_REPEAT) ? "   (repeatable)" : "");
        wrap(f, "#   ", o->help, CONF_WIDTH);
        if (has_default(o)) {
            fprintf(f, "#   Default: %s\n#%s = %s\n", o->def, o->name, o->def);
        } else if (!help_has_default(o)) {
            fputs("#   Default: none.\n", f);
        }
        const struct example *ex = example_for(o->name);
        if (ex) {
            fputs("#   Example:\n", f);
            for (int k = 0; k < 4 && ex->lines[k]; k++)
                fprintf(f, "#%s = %s\n", o->name, ex->lines[k]);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Shared man page parts */

static void man_header(FILE *f, const char *title, int section, const char *manual)
{
    fprintf(f,
            ".\\\" %s.%d: generated from the mtproxy option table by gen_docs; do not edit.\n"
            ".TH %s %d \"\" \"mtproxy %s\" \"%s\"\n",
            title, section, title, section, MTPROXY_VERSION, manual);
}

/* One .TP entry per option; cli selects `--key ARG` (mtproxy.8) or `key = ARG` (.conf.5). */
static void man_options(FILE *f, int cli)
{
    for (size_t i = 0; i < options_count; i++) {
        const struct config_option *o = &options_table[i];
        const char *title = section_title(o->name);
        if (title) {
            fputs(".SS ", f);
            roff(f, title);
            fputc('\n', f);
        }
        char arg[128];
        if (cli)
            snprintf(arg, sizeof arg, "%s", o->arg ? o->arg : "VALUE");
        else
            conf_arg(o, arg, sizeof arg);
        fputs(".TP\n", f);
        fputs(cli ? "\\fB\\-\\-" : "\\fB", f);
        roff(f, o->name);
        fputs(cli ? "\\fR \\fI" : "\\fR = \\fI", f);
        roff(f, arg);
        fputs("\\fR\n", f);
        roff(f, o->help);
        fputc('\n', f);
        if (o->flags & CFG_REPEAT)
            fputs(cli ? "May be repeated; given on the command line, it replaces the file's "
                        "lines for this key.\n"
                      : "May be repeated.\n",
                  f);
        if (has_default(o)) {
            fputs("Default: \\fB", f);
            roff(f, o->def);
            fputs("\\fR.\n", f);
        } else if (!help_has_default(o)) {
            fputs("Default: none.\n", f);
        }
        const struct example *ex = example_for(o->name);
        if (ex && !cli) {
            fputs("Example:\n.RS\n.nf\n", f);
            for (int k = 0; k < 4 && ex->lines[k]; k++) {
                roff(f, o->name);
                fputs(" = ", f);
                roff(f, ex->lines[k]);
                fputc('\n', f);
            }
            fputs(".fi\n.RE\n", f);
        }
    }
}

static void man_values(FILE *f)
{
    fputs(".TP\n.B on\\fR|\\fBoff\n"
          "Also yes/no, true/false, 1/0 (any case).\n"
          ".TP\n.I BYTES\n"
          "A size: a number with an optional suffix k, M or G (also kb, KiB and so on; binary "
          "multiples: 16k = 16384).\n"
          ".TP\n.I DURATION\n"
          "A number with a suffix ms, s, m or h; a bare number is seconds.\n"
          ".TP\n.IR N \", \" ID\n"
          "A decimal integer within the key's range; out-of-range values are errors.\n",
          f);
}

/* ---------------------------------------------------------------------------------------- */
/* mtproxy.8 */

static void write_man8(FILE *f, const char *sysconfdir)
{
    man_header(f, "mtproxy", 8, "System Manager's Manual");
    fputs(".SH NAME\nmtproxy \\- MTProto proxy for Telegram\n"
          ".SH SYNOPSIS\n"
          ".B mtproxy\n"
          "[\\fB\\-\\-config\\fR \\fIFILE\\fR] [\\fB\\-\\-\\fIKEY VALUE\\fR ...]\n"
          ".br\n"
          ".B mtproxy \\-\\-check\\-config\n"
          "[\\fB\\-\\-config\\fR \\fIFILE\\fR] [\\fB\\-\\-\\fIKEY VALUE\\fR ...]\n"
          ".br\n"
          ".B mtproxy generate\\-secret\n"
          "[\\fB\\-\\-dd\\fR | \\fB\\-\\-tls\\fR \\fIDOMAIN\\fR]\n"
          ".br\n"
          ".B mtproxy\n"
          "\\fB\\-\\-help\\fR | \\fB\\-\\-version\\fR\n"
          ".SH DESCRIPTION\n"
          ".B mtproxy\n"
          "relays Telegram clients that speak obfuscated2 (plain and dd secrets) or FakeTLS "
          "(ee secrets) to the Telegram data centre each client asks for, and forwards "
          "anything else byte for byte to the real web server of the fronted domain. One "
          "worker thread per CPU core runs its own event loop and its own listening socket.\n"
          ".PP\n"
          "Settings come from the built-in defaults, then the configuration file given with "
          "\\fB\\-\\-config\\fR (see\n.BR mtproxy.conf (5)),\n"
          "then the command line: every key of the file can be given as "
          "\\fB\\-\\-\\fIKEY VALUE\\fR (or \\fB\\-\\-\\fIKEY\\fB=\\fIVALUE\\fR) with the value "
          "syntax of the file, and the command line wins.\n"
          "All configuration errors are reported, each as \\fIfile\\fB:\\fIline\\fB: "
          "\\fImessage\\fR, before mtproxy exits.\n"
          ".PP\n"
          "With no secret configured, mtproxy generates one at first start, keeps it in "
          "\\fBstate\\-file\\fR so that it survives restarts, and prints the tg:// and "
          "https://t.me links for every secret at start.\n"
          ".SH COMMANDS\n"
          ".TP\n\\fB\\-\\-config\\fR \\fIFILE\\fR, \\fB\\-c\\fR \\fIFILE\\fR\n"
          "Read the configuration file \\fIFILE\\fR. Without it only defaults and the command "
          "line apply.\n"
          ".TP\n.B \\-\\-check\\-config\n"
          "Validate the configuration (file and command line), print a summary and exit. It "
          "binds no socket, opens no connection and writes no file. It reads "
          "\\fBallow\\-file\\fR and \\fBdeny\\-file\\fR, and it resolves every host "
          "name the configuration names: in \\fBdc\\fR lines, the \\fBsocks5\\fR and "
          "\\fBreplay\\-store\\fR servers, and the fronting hosts (\\fBmask\\-host\\fR, "
          "else each ee secret's domain, checked not to be the proxy itself), so it needs "
          "working DNS when there are names; a name that does not resolve is an error. Exit "
          "status 0 if the configuration is valid, 2 if not.\n"
          ".TP\n\\fBgenerate\\-secret\\fR [\\fB\\-\\-dd\\fR | \\fB\\-\\-tls\\fR "
          "\\fIDOMAIN\\fR]\n"
          "Print a new random secret: 32 hex digits; with \\fB\\-\\-dd\\fR the dd form "
          "(padded intermediate only); with \\fB\\-\\-tls\\fR the ee form for FakeTLS "
          "fronting \\fIDOMAIN\\fR. Use it as \\fBsecret = \\fINAME\\fB:\\fISECRET\\fR.\n"
          ".TP\n\\fBuser\\fR \\fICOMMAND\\fR [\\fINAME\\fR] [\\fB\\-\\-config\\fR \\fIFILE\\fR] "
          "[\\fB\\-\\-json\\fR]\n"
          "Manage users: \\fBadd\\fR \\fINAME\\fR [\\fB\\-\\-dd\\fR | \\fB\\-\\-tls\\fR "
          "\\fIDOMAIN\\fR] [\\fB\\-\\-secret\\fR \\fIHEX\\fR] [\\fB\\-\\-limit\\fR "
          "\\fI'KEY=VALUE ...'\\fR] (prints the links), \\fBlist\\fR, \\fBshow\\fR \\fINAME\\fR "
          "[\\fB\\-\\-qr\\fR], \\fBset\\fR \\fINAME\\fR \\fB\\-\\-limit\\fR ..., "
          "\\fBdisable\\fR, \\fBenable\\fR, \\fBdel\\fR, \\fBrotate\\fR \\fINAME\\fR "
          "[\\fB\\-\\-grace\\fR \\fIDURATION\\fR], \\fBreset\\-quota\\fR \\fINAME\\fR. "
          "With the proxy running it goes through the management API (\\fBapi\\fR and "
          "\\fBapi\\-token\\fR of the configuration); with it stopped (no process holds the "
          "state file's lock) it changes \\fBusers\\-file\\fR (and the state file) directly, "
          "for the next start. Exit status 0 done, 1 refused, 2 usage. See "
          "\\fBmtproxy user \\-\\-help\\fR.\n"
          ".TP\n\\fB\\-\\-help\\fR, \\fB\\-h\\fR\n"
          "Print the usage and every key with its default.\n"
          ".TP\n.B \\-\\-version\n"
          "Print the version.\n"
          ".SH OPTIONS\n"
          "Each key of\n.BR mtproxy.conf (5)\nas a command-line option.\n",
          f);
    man_options(f, 1);
    fputs(".SS Values\n", f);
    man_values(f);
    fputs(".SH SIGNALS\n"
          ".TP\n.BR SIGTERM \", \" SIGINT\n"
          "Stop accepting, close every connection and exit with status 0.\n"
          ".TP\n.B SIGHUP\n"
          "Reopen the log file (for log rotation) and reload the configuration (users-file "
          "and access-list files too): checked whole, and either rejected with every error "
          "logged (the running one stays) or used by new connections; keys read once at "
          "start are logged as needing a restart.\n"
          ".TP\n.B SIGUSR1\n"
          "Log the counters (connections, bytes, close reasons) at level info.\n"
          ".TP\n.B SIGUSR2\n"
          "Write the state file (the quota each user has used) now.\n"
          ".SH FILES\n"
          ".TP\n",
          f);
    roff(f, sysconfdir);
    fputs("/mtproxy/mtproxy.conf\n"
          "The configuration file read by the systemd unit and the init scripts.\n"
          ".TP\n.I mtproxy.state\n"
          "The secret generated when none is configured (\\fBstate\\-file\\fR; a relative "
          "path is relative to the working directory). The systemd unit runs in "
          "\\fI/var/lib/mtproxy\\fR.\n"
          ".SH EXIT STATUS\n"
          ".TP\n.B 0\nStopped by a signal, or the command succeeded.\n"
          ".TP\n.B 1\nA run-time failure: a socket could not be bound, a worker could not "
          "start, the pidfile could not be written, privileges could not be dropped.\n"
          ".TP\n.B 2\nA configuration error (bad file, bad option, unwritable state file, "
          "unusable log target).\n"
          ".TP\n.B 75\nA listen port or the state file's lock is held by another process "
          "(an old instance still closing, another server; EX_TEMPFAIL): worth a retry.\n"
          ".SH EXAMPLES\n"
          "Run on port 443 with two secrets, on the command line only:\n"
          ".PP\n.RS\n.nf\n"
          "mtproxy \\-\\-listen 0.0.0.0:443 \\-\\-listen [::]:443 \\e\n"
          "        \\-\\-secret alice:$(mtproxy generate\\-secret) \\e\n"
          "        \\-\\-secret bob:$(mtproxy generate\\-secret \\-\\-dd)\n"
          ".fi\n.RE\n"
          ".PP\n"
          "Check a configuration file, then run it:\n"
          ".PP\n.RS\n.nf\n"
          "mtproxy \\-\\-check\\-config \\-\\-config ",
          f);
    roff(f, sysconfdir);
    fputs("/mtproxy/mtproxy.conf\n"
          "mtproxy \\-\\-config ",
          f);
    roff(f, sysconfdir);
    fputs("/mtproxy/mtproxy.conf\n"
          ".fi\n.RE\n"
          ".SH SEE ALSO\n"
          ".BR mtproxy.conf (5),\n"
          ".BR systemd.service (5)\n",
          f);
}

/* ---------------------------------------------------------------------------------------- */
/* mtproxy.conf.5 */

static void write_man5(FILE *f, const char *sysconfdir)
{
    man_header(f, "mtproxy.conf", 5, "File Formats Manual");
    fputs(".SH NAME\nmtproxy.conf \\- configuration file of mtproxy\n"
          ".SH SYNOPSIS\n.I ",
          f);
    roff(f, sysconfdir);
    fputs("/mtproxy/mtproxy.conf\n"
          ".SH DESCRIPTION\n"
          "The file holds one \\fIkey\\fB = \\fIvalue\\fR setting per line. A \\fB#\\fR at the "
          "start of a line or after white space starts a comment; blank lines are ignored; a "
          "value may be put in double quotes. Keys marked repeatable may be given several "
          "times; any other key given twice keeps the last value. Unknown keys and bad values "
          "are errors, all of them reported as \\fIfile\\fB:\\fIline\\fB: \\fImessage\\fR.\n"
          ".PP\n"
          "Every key can also be given to\n.BR mtproxy (8)\n"
          "as \\fB\\-\\-\\fIkey value\\fR; the command line wins over the file, and a "
          "repeatable key given there replaces the file's lines for that key.\n"
          ".PP\n"
          "The shipped file shows every key commented out with its default, and holds no "
          "secret: with none configured, mtproxy generates one into \\fBstate\\-file\\fR at "
          "first start.\n"
          "Check a file with \\fBmtproxy \\-\\-check\\-config \\-\\-config \\fIFILE\\fR.\n"
          ".SH VALUES\n",
          f);
    man_values(f);
    fputs(".SH KEYS\n", f);
    man_options(f, 0);
    fputs(".SH EXAMPLE\n"
          ".RS\n.nf\n"
          "listen = 0.0.0.0:443\n"
          "listen = [::]:443\n"
          "secret = alice:<output of: mtproxy generate\\-secret>\n"
          "public\\-host = proxy.example.org\n"
          "workers = 2\n"
          "max\\-connections = 4096\n"
          "log = syslog\n"
          ".fi\n.RE\n"
          ".SH SEE ALSO\n"
          ".BR mtproxy (8)\n",
          f);
}

/* ---------------------------------------------------------------------------------------- */

static int write_file(const char *dir, const char *name, const char *sysconfdir,
                      void (*fn)(FILE *, const char *))
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gen_docs: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fn(f, sysconfdir);
    if (ferror(f) | fclose(f)) {
        fprintf(stderr, "gen_docs: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static void conf_fn(FILE *f, const char *unused)
{
    (void)unused;
    write_conf(f);
}

int main(int argc, char **argv)
{
    const char *sysconfdir = "/etc", *outdir = NULL;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sysconfdir") == 0 && i + 1 < argc)
            sysconfdir = argv[++i];
        else if (argv[i][0] != '-' && !outdir)
            outdir = argv[i];
        else
            bad = 1;
    }
    if (!outdir || bad) {
        fprintf(stderr, "usage: gen_docs [--sysconfdir DIR] OUTDIR\n"
                        "writes OUTDIR/mtproxy.8, OUTDIR/mtproxy.conf.5, OUTDIR/mtproxy.conf\n");
        return 2;
    }
    if (write_file(outdir, "mtproxy.8", sysconfdir, write_man8) ||
        write_file(outdir, "mtproxy.conf.5", sysconfdir, write_man5) ||
        write_file(outdir, "mtproxy.conf", sysconfdir, conf_fn))
        return 1;
    return 0;
}
