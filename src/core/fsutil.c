/* fsutil.c: atomic, symlink-safe file replacement for the state file, pidfile and links file. */
#include "core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t owner,
                    char *err, size_t errlen)
{
    char dir[4096], tmp[4200];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || strlen(path) >= sizeof dir) {
        snprintf(err, errlen, "%s: not a file path", path);
        return -1;
    }
    if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(err, errlen, "cannot open directory %s: %s", dir, strerror(errno));
        return -1;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        unsigned r;
        FILE *u = fopen("/dev/urandom", "re");
        if (!u || fread(&r, sizeof r, 1, u) != 1)
            r = (unsigned)getpid() * 2654435761u + (unsigned)attempt;
        if (u)
            fclose(u);
        snprintf(tmp, sizeof tmp, ".%s.%08x.tmp", base, r);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a file in %s: %s", dir, strerror(errno));
        close(dfd);
        return -1;
    }
    const char *what = NULL;
    const unsigned char *p = data;
    size_t left = len;
    while (left && !what) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            what = "write";
        else
            p += w, left -= (size_t)w;
    }
    /* the umask may have narrowed mode at creation; owner first, then exactly mode */
    if (!what && owner != (uid_t)-1 && fchown(fd, owner, (gid_t)-1) != 0)
        what = "chown";
    if (!what && fchmod(fd, mode) != 0)
        what = "chmod";
    if (!what && fsync(fd) != 0)
        what = "fsync";
    int e = errno;
    if (close(fd) != 0 && !what)
        what = "close", e = errno;
    if (!what && renameat(dfd, tmp, dfd, base) != 0)
        what = "rename", e = errno;
    if (what) {
        unlinkat(dfd, tmp, 0);
        close(dfd);
        snprintf(err, errlen, "cannot write %s (%s): %s", path, what, strerror(e));
        return -1;
    }
    fsync(dfd); /* the rename itself survives a crash */
    close(dfd);
    return 0;
}
