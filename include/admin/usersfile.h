/* usersfile.h: users-file as records: read, checked with the config's own parsers, changed, written atomically (the API and `mtproxy user`). */
#ifndef MTPROXY_PROXY_USERSFILE_H
#define MTPROXY_PROXY_USERSFILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/sbuf.h"
#include "proto/secret.h"

/* One user of users-file: its secret line's value and limit line's value (NULL: none). */
struct usersfile_rec {
    char name[SECRET_NAME_MAX];
    char *secret, *limit;
};

/* users-file as read: its users in file order, and the text it was read from. */
struct usersfile {
    struct usersfile_rec *r;
    int n, cap;
    char *text; /* as read (NULL: no file) */
    size_t len;
};

/* Frees u's records and text (u is then empty). */
void usersfile_free(struct usersfile *u);

/* Index of name's record, or -1. */
int usersfile_find(const struct usersfile *u, const char *name);

/* The record of name[0..n) (added, empty, if new), or NULL (out of memory). Adding may move
 * the records: indexes stay, pointers do not. */
struct usersfile_rec *usersfile_rec(struct usersfile *u, const char *name, size_t n);

/* Checks users-file text with the reload's own parser (options_load_users). Returns 0, or -1
 * with the first error in err ("PATH:LINE: ...") and the key of that line in key ("" if
 * none). */
int usersfile_check(const char *path, const char *text, size_t len, char *err, size_t errlen,
                    char *key, size_t keylen);

/* Reads path into u (a missing file is empty: u->text NULL). Returns 0, or -1 with err
 * (unreadable, too large, or a line that does not parse: a hand edit must be fixed first);
 * free u either way. */
int usersfile_load(struct usersfile *u, const char *path, char *err, size_t errlen);

/* users-file's text for u (a header comment, then secret and limit lines). Returns 0, or -1
 * (b->max reached / out of memory). */
int usersfile_render(const struct usersfile *u, struct sbuf *b);

/* Drops the NAME.prev users (a rotation's grace) whose expires= has passed. */
void usersfile_prune(struct usersfile *u);

/* NAME.prev (the old secret of a rotation with a grace) is NAME under its old secret: its
 * limit line becomes NAME's fields with expires= the grace's end until (0: the one its line
 * has), or NAME's own expires= if that is earlier. Nothing without a NAME.prev (or when its
 * line has no expires=: a hand edit). Returns 0, or -1 (out of memory, line too long). */
int usersfile_sync_prev(struct usersfile *u, const char *name, int64_t until);

/* Sets r's limit line's value to lim ("": none). Returns 0, or -1 (out of memory). */
int usersfile_set_limit(struct usersfile_rec *r, const char *lim);

/* Adds (on) or removes a bare word (`disabled`) in r's limit line; a line left with no field
 * goes. Returns 0, or -1 (out of memory, line too long). */
int usersfile_set_word(struct usersfile_rec *r, const char *word, int on);

enum { USERSFILE_INVALID = -1, USERSFILE_TOO_BIG = -2, USERSFILE_WRITE_FAILED = -3 };

/* Drops lapsed NAME.prev users, renders u, checks the new text with the reload's parser and
 * writes it to path atomically (temporary file, fsync, rename, fsync of the directory; mode
 * 0600; a symbolic link is written through: its target is replaced, the link stays). Returns 0, or USERSFILE_INVALID (err "PATH:LINE: ...", key: that line's key),
 * USERSFILE_TOO_BIG or USERSFILE_WRITE_FAILED (err; the old file is untouched). */
int usersfile_write(const char *path, struct usersfile *u, char *err, size_t errlen, char *key,
                    size_t keylen);

/* Puts back the text u was read from (or removes path if there was none). Returns 0, or -1
 * with err. */
int usersfile_restore(const char *path, const struct usersfile *u, char *err, size_t errlen);

/* The state file with the daemon stopped: drops user name's `quota-used` line (its usage
 * starts over at the next start), rewriting path atomically if there was one (*found = 1).
 * fleet (limits-store is on): a line `quota-reset = NAME` is added (the file made if there is
 * none): the next start resets the fleet's count too (lstore_reset_quota). A missing file is
 * no error. Returns 0, or -1 with err. */
int usersfile_state_drop_quota(const char *path, const char *name, int fleet, int *found,
                               char *err, size_t errlen);

#endif
