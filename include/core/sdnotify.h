/* sdnotify.h: tells a service manager (systemd's Type=notify) that the proxy is ready or stopping,
 * through the datagram socket NOTIFY_SOCKET names; nothing at all when it names none. */
#ifndef MTPROXY_CORE_SDNOTIFY_H
#define MTPROXY_CORE_SDNOTIFY_H

/* Sends STATE (e.g. "READY=1\nMAINPID=123") to $NOTIFY_SOCKET. Returns 1 when sent, 0 when
 * no socket is named, -1 (errno set) when it is named but the send failed. */
int sd_notify_state(const char *state);

#endif
