#!/bin/bash
# healthcheck.sh: Docker HEALTHCHECK: the proxy accepts a TCP connection on 127.0.0.1 (no internet needed).
# bash's /dev/tcp opens the connection; closing it at once costs the proxy one short-lived
# handshake. Port: MTPROXY_HEALTH_PORT (default 8443).
port=${MTPROXY_HEALTH_PORT:-8443}
if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
    exec 3>&-
    exit 0
fi
echo "mtproxy does not accept connections on 127.0.0.1:$port" >&2
exit 1
