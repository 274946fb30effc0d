# annexd in a container: a static binary on a minimal base, run as a non-root
# user, with the index and the watched directory as volumes.
#
#   docker build -t annexd .
#   docker run -d --name annexd \
#     -v annexd-state:/var/lib/annexd \
#     -v "$HOME/Pictures:/data:ro" \
#     annexd
#   docker exec annexd annexctl status
#   docker exec annexd annexctl lookup /data/some/file.jpg
#
# A config file, if wanted, goes to /etc/annexd/annexd.toml (for example
# -v ./annexd.toml:/etc/annexd/annexd.toml:ro); see configs/annexd.example.toml.
# The watched directory can be mounted read-only: annexd only reads it. The
# container's user (uid 65532, distroless "nonroot") must be able to read it. inotify works on bind
# mounts of local file systems; raise fs.inotify.max_user_watches on the host
# for large trees (annexd logs the exact sysctl when it runs short).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/annexd ./cmd/annexd \
 && go build -trimpath -ldflags="-s -w" -o /out/annexctl ./cmd/annexctl \
 && install -d -m 0700 /out/state /out/run \
 && install -d -m 0755 /out/data

FROM gcr.io/distroless/static-debian12:nonroot AS run
COPY --from=build /out/annexd /out/annexctl /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/state /var/lib/annexd
COPY --from=build --chown=65532:65532 /out/run /run/annexd
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV XDG_STATE_HOME=/var/lib \
    XDG_CONFIG_HOME=/etc \
    ANNEXD_SOCKET=/run/annexd/annexd.sock
VOLUME ["/var/lib/annexd", "/data"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/annexctl", "status"]
ENTRYPOINT ["/usr/local/bin/annexd", "--socket", "/run/annexd/annexd.sock", "--index", "/var/lib/annexd/index.db"]
CMD ["/data"]
