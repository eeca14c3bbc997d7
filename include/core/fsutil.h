/* fsutil.h: files written atomically and safely (no symlink followed, no leftover mode kept). */
#ifndef MTPROXY_CORE_FSUTIL_H
#define MTPROXY_CORE_FSUTIL_H

#include <stddef.h>
#include <sys/types.h>

/* Writes data to path atomically: a new temporary file in path's directory, created with
 * O_EXCL | O_NOFOLLOW and exactly `mode` (never an existing or planted file: a symlink or a
 * leftover at any temporary name is not followed or reused), written, fsync'ed, given to
 * owner (unless (uid_t)-1), renamed over path (a symlink at path is replaced, not followed),
 * and the directory fsync'ed. On failure nothing is left behind and path is untouched.
 * Returns 0, or -1 with a message in err. */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t owner,
                    char *err, size_t errlen);

/* Removes the temporary files fs_write_atomic left for path when it was killed mid-write
 * (.BASE.XXXXXXXX.tmp in path's directory: regular files of this user, last changed at least
 * older_than_s seconds ago, so a write in progress elsewhere is not touched). Returns how
 * many went. */
int fs_remove_stale_tmp(const char *path, int older_than_s);

#endif
