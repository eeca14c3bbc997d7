/* fsutil.c: atomic, symlink-safe file replacement for the state file, pidfile and links file. */
#include "core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* path's directory into dir ("/", "." or the part before the last '/'). Returns the file's
 * name (the part after), or NULL if path names no file or is too long. */
static const char *dir_of(const char *path, char *dir, size_t dirlen)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || strlen(path) >= dirlen)
        return NULL;
    if (slash == path)
        snprintf(dir, dirlen, "/");
    else if (slash)
        snprintf(dir, dirlen, "%.*s", (int)(slash - path), path);
    else
        snprintf(dir, dirlen, ".");
    return base;
}

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t owner,
                    char *err, size_t errlen)
{
    char dir[4096], tmp[4200];
    const char *base = dir_of(path, dir, sizeof dir);
    if (!base) {
        snprintf(err, errlen, "%s: not a file path", path);
        return -1;
    }
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

int fs_remove_stale_tmp(const char *path, int older_than_s)
{
    char dir[4096];
    const char *base = dir_of(path, dir, sizeof dir);
    if (!base)
        return 0;
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name; /* .BASE.XXXXXXXX.tmp, as fs_write_atomic names them */
        struct stat st;
        if (strlen(n) != bl + 14 || n[0] != '.' || memcmp(n + 1, base, bl) || n[bl + 1] != '.' ||
            strspn(n + bl + 2, "0123456789abcdef") != 8 || strcmp(n + bl + 10, ".tmp"))
            continue;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid() || st.st_mtime > now - older_than_s)
            continue;
        removed += unlinkat(dirfd(d), n, 0) == 0;
    }
    closedir(d);
    return removed;
}
