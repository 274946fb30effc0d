# annexd in a container: a static binary on a minimal base, run as a non-root
# user, with the index and the watched directory as volumes.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t annexd .
#   docker run -d --name annexd \
#     -v annexd-state:/var/lib/annexd \
#     -v "$HOME/Pictures:$HOME/Pictures" \
#     annexd "$HOME/Pictures"
#   docker exec annexd annexctl status
#   docker exec annexd annexctl lookup "$HOME/Pictures/some/file.jpg"
#
# Mount the watched directory at the same path inside as outside, and give
# that path as the root: annexd answers with the paths it indexed, so they
# are then the host's paths, which git-annex, scripts and the other hosts of
# a hub can use as they are. (Mounted elsewhere, at /data say, every answer
# names /data/… and has to be translated by hand.) A config file, if wanted,
# goes to /etc/annexd/annexd.toml (for example
# -v ./annexd.toml:/etc/annexd/annexd.toml:ro); see configs/annexd.example.toml.
# The watched directory may be mounted read-only (:ro) only while nothing
# deduplicates: `annexctl dedup` and [dedup] continuous make copies share
# their storage by rewriting files in place (reflinks, hard links), which a
# read-only mount refuses; indexing and the audit only read. The container's
# user (uid 65532, distroless "nonroot") must be able to read the directory,
# and to write it for dedup. inotify works on bind mounts of local file
# systems; raise fs.inotify.max_user_watches on the host for large trees
# (annexd logs the exact sysctl when it runs short).
#
# VERSION stamps the binaries (annexd --version, annexctl status): the build
# context leaves out .git, so Go cannot stamp them from it.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
ARG VERSION=
RUN ldflags="-s -w -X github.com/annexd/annexd/internal/version.Stamp=${VERSION}" \
 && go build -trimpath -ldflags="$ldflags" -o /out/annexd ./cmd/annexd \
 && go build -trimpath -ldflags="$ldflags" -o /out/annexctl ./cmd/annexctl \
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
