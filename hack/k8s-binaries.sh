#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and kubectl from the Go
# module proxy at the pinned versions, into a cache outside the repository keyed by version:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/kubernetes/<KUBE_VERSION>-etcd<ETCD_VERSION>/bin
# It prints that bin directory on its last line. A cached set is reused; nothing is rebuilt unless a pin
# changes. Progress (packages compiled) is shown on stderr while building.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
dir="$cache/kubernetes/${KUBE_VERSION}-etcd${ETCD_VERSION}"
bin="$dir/bin"
cmds=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl)
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$dir/mod" "$bin"
mod="$dir/mod"
gomod=$(k8s_gomod k8s-binaries ironlb.local/k8sbuild "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}")
echo "$gomod" >"$mod/go.mod"
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
tools_go "${pkgs[@]}" go.etcd.io/etcd/server/v3 >"$mod/tools.go"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
cd "$mod"
echo "k8s-binaries: resolving modules for Kubernetes ${KUBE_VERSION} and etcd ${ETCD_VERSION} (first time: ~800 MB download)" >&2
go mod tidy >&2
ldflags=$(k8s_ldflags)
total=$(go list -deps "${pkgs[@]}" go.etcd.io/etcd/server/v3 2>/dev/null | wc -l)
echo "k8s-binaries: compiling ${#cmds[@]} Kubernetes commands and etcd (${total} packages; cold build takes ~12 min on 2 cores)" >&2
start=$(date +%s)
go build -v -trimpath -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}" 2> >(progress k8s-binaries 100 "$total" "$start" all)
go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
for c in "${cmds[@]}" etcd; do [ -x "$bin/$c" ] || { echo "k8s-binaries: $c was not built" >&2; exit 1; }; done
"$bin/kube-apiserver" --version >&2
echo "k8s-binaries: built in $(( $(date +%s) - start ))s into $bin" >&2
touch "$bin/.complete"
echo "$bin"
