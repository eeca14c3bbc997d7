# Dockerfile: mtproxy image: Debian 12 build stage, then a small non-root runtime (libev4, libssl3, zlib1g, libqrencode4, libhiredis0.14).
#
#   docker build -t mtproxy .
#   docker run -d --name mtproxy -p 443:8443 -v mtproxy-state:/var/lib/mtproxy mtproxy \
#       --config /etc/mtproxy/mtproxy.conf --public-host proxy.example.org --public-port 443
#
# Configure with a mounted file (-v /srv/mtproxy.conf:/etc/mtproxy/mtproxy.conf:ro) and/or
# --KEY VALUE flags after the image name (they replace the default command, so keep --config if
# you want the file). With no secret configured, one is generated into the state volume and
# its links are written next to it: docker exec mtproxy cat /var/lib/mtproxy/mtproxy.state.links.
# See packaging/README.md.

FROM debian:bookworm-slim AS build
# Not pinned (DL3008): bookworm's security updates should flow into rebuilt images.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        gcc libc6-dev make cmake pkg-config libev-dev libssl-dev \
        zlib1g-dev libqrencode-dev libhiredis-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt mtproxy.conf ./
COPY cmake/ cmake/
COPY include/ include/
COPY src/ src/
COPY packaging/ packaging/
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
        -DMTPROXY_TESTS=OFF -DMTPROXY_BENCH=OFF -DMTPROXY_DOCS=OFF \
        -DMTPROXY_INSTALL_SYSTEMD=OFF \
    && cmake --build build -j"$(nproc)" \
    && DESTDIR=/out cmake --install build --strip

FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libev4 libssl3 zlib1g libqrencode4 libhiredis0.14 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --user-group --uid 10001 --home-dir /var/lib/mtproxy \
        --shell /usr/sbin/nologin mtproxy \
    && install -d -o mtproxy -g mtproxy -m 0700 /var/lib/mtproxy
COPY --from=build /out/usr/bin/mtproxy /usr/bin/mtproxy
COPY --from=build /out/etc/mtproxy/mtproxy.conf /etc/mtproxy/mtproxy.conf
COPY packaging/docker/healthcheck.sh /usr/libexec/mtproxy/healthcheck.sh

# Numeric, so runtimes that insist on a non-root uid (runAsNonRoot) can check it.
USER 10001:10001
# The default relative state-file (the generated secret) lands here: keep it on a volume.
WORKDIR /var/lib/mtproxy
VOLUME ["/var/lib/mtproxy"]
EXPOSE 8443
# The port the health check connects to on 127.0.0.1: set it if you listen elsewhere.
ENV MTPROXY_HEALTH_PORT=8443
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["bash", "/usr/libexec/mtproxy/healthcheck.sh"]
ENTRYPOINT ["/usr/bin/mtproxy"]
CMD ["--config", "/etc/mtproxy/mtproxy.conf"]
