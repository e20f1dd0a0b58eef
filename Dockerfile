# syntax=docker/dockerfile:1
# The proxy's image, ghcr.io/ironlb/ironlb-proxy: ironlb with the nft tool, which `ironlb proxy`
# still runs for its direct-server-return table (docs/image.md says where). Needs a Docker daemon:
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

# The proxy's DSR table goes through the nft tool (knftables); its own tables and stale UDP flows
# go over netlink.
FROM debian:bookworm-slim AS proxy
RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ironlb /usr/local/bin/ironlb
ENTRYPOINT ["/usr/local/bin/ironlb"]
