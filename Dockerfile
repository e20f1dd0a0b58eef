# syntax=docker/dockerfile:1
# The proxy's image, ghcr.io/ironlb/ironlb-proxy: the static binary alone, as ironlb's own image
# has it. `ironlb proxy` runs no tool: its tables (the direct-server-return table too), --cleanup
# and stale UDP flows all go over netlink (docs/image.md). Needs a Docker daemon:
#   docker build --build-arg VERSION=$(cat VERSION) --build-arg COMMIT=$(git rev-parse HEAD) \
#     -t ghcr.io/ironlb/ironlb-proxy:$(cat VERSION) .
# ironlb's own image (controller, speaker, status; ghcr.io/ironlb/ironlb) is built without a daemon
# and reproducibly by `make image` (hack/image; docs/image.md).
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

# No nft, no conntrack, no shell: the proxy needs none (docs/image.md). The path and entrypoint are
# ironlb's image's (/ironlb; the lab pushes ironlb's image itself under this name).
FROM scratch AS proxy
COPY --from=build /out/ironlb /ironlb
ENTRYPOINT ["/ironlb"]
