/* acl.c: builds the allow/deny access list from options and files; the check at accept. */
#include "users/acl.h"

#include <stdio.h>
#include <string.h>

static void report(void *ctx, const char *msg)
{
    struct config_errors *e = ctx;
    if (e->count < CONFIG_MAX_ERRORS)
        snprintf(e->msg[e->count], CONFIG_ERR_LEN, "%s", msg);
    e->count++;
}

static int fill(struct cidr_set *s, const struct cidr *lines, int nlines,
                const char (*files)[OPT_PATH_MAX], int nfiles, struct config_errors *errs)
{
    int bad = 0;
    for (int i = 0; i < nlines; i++) {
        if (cidr_set_add(s, &lines[i])) {
            report(errs, "access list: out of memory");
            return bad + 1;
        }
    }
    for (int i = 0; i < nfiles; i++) {
        int n = cidr_set_load_file(s, files[i], report, errs);
        bad += n < 0 ? 1 : n;
    }
    cidr_set_finish(s);
    return bad;
}

int acl_build(struct acl *a, const struct options *o, struct config_errors *errs)
{
    memset(a, 0, sizeof *a);
    int bad = fill(&a->allow, o->allow, o->nallow, o->allow_files, o->nallow_files, errs);
    bad += fill(&a->deny, o->deny, o->ndeny, o->deny_files, o->ndeny_files, errs);
    a->has_allow = a->allow.added > 0;
    bad += fill(&a->pp_from, o->pp_from, o->npp_from, NULL, 0, errs);
    return bad;
}

int acl_active(const struct acl *a)
{
    return a->has_allow || a->deny.added > 0;
}

enum acl_verdict acl_check(const struct acl *a, const struct sockaddr *sa)
{
    if (cidr_set_contains(&a->deny, sa))
        return ACL_DENIED;
    if (a->has_allow && !cidr_set_contains(&a->allow, sa))
        return ACL_NOT_ALLOWED;
    return ACL_PASS;
}

int acl_pp_trusted(const struct acl *a, const struct sockaddr *sa)
{
    return a->pp_from.added == 0 || cidr_set_contains(&a->pp_from, sa);
}

void acl_free(struct acl *a)
{
    cidr_set_free(&a->pp_from);
    cidr_set_free(&a->allow);
    cidr_set_free(&a->deny);
    a->has_allow = 0;
}
