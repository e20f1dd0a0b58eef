#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and kubectl from the Go
# module proxy at the pinned versions, into a cache outside the repository keyed by version:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/kubernetes/<KUBE_VERSION>-etcd<ETCD_VERSION>/bin
# It prints that bin directory on its last line. A cached set is reused; nothing is rebuilt unless a pin
# changes. Progress (packages compiled) is shown on stderr while building.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
cache=${IRONLB_CACHE:-$HOME/.cache/ironlb}
dir="$cache/kubernetes/${KUBE_VERSION}-etcd${ETCD_VERSION}"
bin="$dir/bin"
cmds=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl)
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$dir/mod" "$bin"
mod="$dir/mod"
minor=${KUBE_VERSION#v1.}                # 37.2
staging_ver="v0.${minor}"
kmod=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$kmod" ] || { echo "k8s-binaries: cannot download k8s.io/kubernetes@${KUBE_VERSION}" >&2; exit 1; }
{
  echo "module ironlb.local/k8sbuild"
  echo
  echo "go 1.26.0"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes ${KUBE_VERSION}"
  echo "	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
  echo ")"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$kmod" | awk '/=> \.\/staging/ {printf "\t%s => %s %s\n", $1, $1, "'"$staging_ver"'"}'
  echo ")"
} >"$mod/go.mod"
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  for c in "${cmds[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
  echo "	_ \"go.etcd.io/etcd/server/v3\""
  echo ")"
} >"$mod/tools.go"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
cd "$mod"
echo "k8s-binaries: resolving modules for Kubernetes ${KUBE_VERSION} and etcd ${ETCD_VERSION} (first time: ~800 MB download)" >&2
go mod tidy >&2
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*} -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor%%.*}"
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
total=$(go list -deps "${pkgs[@]}" go.etcd.io/etcd/server/v3 2>/dev/null | wc -l)
echo "k8s-binaries: compiling ${#cmds[@]} Kubernetes commands and etcd (${total} packages; cold build takes ~12 min on 2 cores)" >&2
start=$(date +%s)
progress() {
  awk -v total="$total" -v start="$start" '
    { n++; if (n % 100 == 0) { cmd = "date +%s"; cmd | getline now; close(cmd);
        printf "k8s-binaries: %d/%d packages compiled (%ds)\n", n, total, now - start > "/dev/stderr"; fflush("/dev/stderr") } }'
}
go build -v -trimpath -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}" 2> >(progress) 
go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
for c in "${cmds[@]}" etcd; do [ -x "$bin/$c" ] || { echo "k8s-binaries: $c was not built" >&2; exit 1; }; done
"$bin/kube-apiserver" --version >&2
echo "k8s-binaries: built in $(( $(date +%s) - start ))s into $bin" >&2
touch "$bin/.complete"
echo "$bin"
