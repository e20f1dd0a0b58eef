# syntax=docker/dockerfile:1
# ironlb's images, from one static binary (CGO_ENABLED=0):
#   docker build -t ghcr.io/ironlb/ironlb:dev .                            controller, speaker, status, ...
#   docker build --target proxy -t ghcr.io/ironlb/ironlb-proxy:dev .      `ironlb proxy`: adds nft and conntrack
# The default image runs as root, as the speaker's DaemonSet expects (capabilities added to a non-root
# process are not effective); the controller's Deployment sets its own non-root user.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o /out/ironlb ./cmd/ironlb

# The proxy runs full syncs through the nft tool (knftables) and flushes stale UDP flows with conntrack.
FROM debian:bookworm-slim AS proxy
RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables conntrack \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ironlb /usr/local/bin/ironlb
ENTRYPOINT ["/usr/local/bin/ironlb"]

# Last, so that a plain `docker build` makes this one.
FROM gcr.io/distroless/static-debian12 AS ironlb
COPY --from=build /out/ironlb /ironlb
ENTRYPOINT ["/ironlb"]
