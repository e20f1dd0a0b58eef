# syntax=docker/dockerfile:1
# ironlb's image, ghcr.io/ironlb/ironlb, with a Docker daemon: the static binary alone, for every role
# (controller, speaker, proxy, status). The proxy runs no tool either: its tables (the
# direct-server-return table too), --cleanup and stale UDP flows all go over netlink (docs/image.md).
#   docker build --build-arg VERSION=$(cat VERSION) --build-arg COMMIT=$(git rev-parse HEAD) \
#     -t ghcr.io/ironlb/ironlb:$(cat VERSION) .
# The released image is built without a daemon and reproducibly by `make image` (hack/image;
# docs/image.md), with the same entrypoint and default user, and besides the binary /etc/passwd,
# /etc/group, /etc/nsswitch.conf and /tmp, which this one lacks (no role needs them: the manifests
# give numeric users, the resolver defaults to files then DNS).
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
ARG VERSION=devel
ARG COMMIT=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X github.com/ironlb/ironlb/internal/version.version=${VERSION} -X github.com/ironlb/ironlb/internal/version.commit=${COMMIT}" \
      -o /out/ironlb ./cmd/ironlb

# No nft, no conntrack, no shell: no role needs them (docs/image.md). The path, entrypoint and
# default user are make image's (/ironlb, nonroot 65532; the speaker and the proxy run as root, which
# their Pods say).
FROM scratch
COPY --from=build /out/ironlb /ironlb
USER 65532:65532
ENTRYPOINT ["/ironlb"]
