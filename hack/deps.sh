#!/usr/bin/env bash
# Installs the Debian packages that `make lab` and `make test` need and a fresh Debian machine with only Go
# lacks (the one list: .ci/run and the Makefile both call this script). Needs root when anything is
# missing; prints what it installs, and nothing when all is there.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# tool -> Debian package
declare -A pkgs=(
  [ip]=iproute2 [iptables]=iptables [nft]=nftables [curl]=curl [arping]=arping [arp-scan]=arp-scan
  [conntrack]=conntrack [tcpdump]=tcpdump [socat]=socat [ndisc6]=ndisc6 [nsenter]=util-linux [ping]=iputils-ping
  [make]=make [git]=git [stress-ng]=stress-ng [promtool]=prometheus
  # dig, run inside pods' namespaces by the cluster-DNS tests (as the upstream images carry it)
  [dig]=bind9-dnsutils
  # nc, which the upstream e2e suite runs in its agnhost and busybox pods (CheckServiceReachability)
  [nc]=netcat-openbsd
  # sysctl, which the namespace tests run (netnstest.Sysctl, the speaker's and the DSR path's), and ps:
  # a minimal Debian has neither
  [sysctl]=procps [ps]=procps
  # cgo for `go test -race`
  [gcc]=gcc
  # runc, the container runtime of `lab up --runtime=runc`
  [runc]=runc
  # wrk, the HTTP load of `lab bench-proxy` and `lab bench-dsr-throughput`
  [wrk]=wrk
  # the shell and applets of the runc lab's busybox, agnhost, nginx and httpd images (a static binary)
  [busybox]=busybox-static
  # GNU wget for the same images: busybox-static 1.35's wget crashes on -T, which the e2e suite passes
  [wget]=wget
)
missing=()
for tool in "${!pkgs[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${pkgs[$tool]}")
done
# FRR (bgpd, bfdd) is the router the BFD and BGP tests and the lab's BGP experiments peer with.
[ -x /usr/lib/frr/bfdd ] || missing+=(frr)
# The C library's headers, which cgo (the race detector) compiles against.
[ -f /usr/include/stdlib.h ] || missing+=(libc6-dev)
# The CA certificates: go downloads every module from the proxy over HTTPS, and a minimal Debian
# (debootstrap's minbase, a container image) has none; no package above depends on them.
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
command -v go >/dev/null || { echo "deps: go is not installed (https://go.dev/doc/install)" >&2; exit 1; }
[ ${#missing[@]} -eq 0 ] && exit 0
# One package can serve two tools (procps: sysctl and ps): name each once.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing Debian packages ${missing[*]}; run as root (the lab needs root anyway) or install them" >&2
  exit 1
fi
echo "deps: installing Debian packages: ${missing[*]}" >&2
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed" >&2
