/* loopback_guard.h: the unit tests' connect(2) guard (see loopback_guard.c). */
#ifndef MTPROXY_TESTS_LOOPBACK_GUARD_H
#define MTPROXY_TESTS_LOOPBACK_GUARD_H

#include <sys/socket.h>

/* 1 if a connect to sa may go ahead: 127.0.0.0/8, ::1, ::ffff:127.x.y.z or AF_UNIX. */
int loopback_guard_allows(const struct sockaddr *sa, socklen_t len);

#endif
