#!/usr/bin/env bash
# Builds the ginkgo CLI at the github.com/onsi/ginkgo/v2 version the pinned Kubernetes module's go.mod
# requires (KUBE_VERSION in hack/versions.env), from the Go module proxy, into the e2e binaries' bin
# directory (hack/e2e-binaries.sh):
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/kubernetes/e2e-<KUBE_VERSION>/bin/ginkgo
# `ironlb lab conformance --procs N` runs e2e.test under it in parallel, as upstream's CI does
# (`ginkgo -p --procs=N e2e.test -- ...`): the CLI and the suite's ginkgo library talk a protocol of
# their own, so the two must be the same version. It is built in a helper module that requires
# k8s.io/kubernetes (the same generated go.mod and staging replaces as hack/e2e-binaries.sh), so ginkgo
# and its dependencies resolve as in Kubernetes' own `make ginkgo`.
# It prints the bin directory on its last line. A ginkgo built by this script and hack/lib.sh as they are
# now (a hash of the two, in bin/.ginkgo-complete, apart from e2e.test's bin/.complete) is reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
key=$(cat "$here/ginkgo-binary.sh" "$here/lib.sh" | sha256sum | cut -c1-12)
dir="$cache/kubernetes/e2e-${KUBE_VERSION}"
bin="$dir/bin"
if [ -x "$bin/ginkgo" ] && [ "$(cat "$bin/.ginkgo-complete" 2>/dev/null)" = "$key" ]; then echo "$bin"; exit 0; fi
rm -f "$bin/.ginkgo-complete"

# The version Kubernetes pins: its go.mod's require line.
kmod=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$kmod" ] || { echo "ginkgo-binary: cannot download k8s.io/kubernetes@${KUBE_VERSION}" >&2; exit 1; }
want=$(awk '$1 == "github.com/onsi/ginkgo/v2" { print $2; exit }' "$kmod")
[ -n "$want" ] || { echo "ginkgo-binary: k8s.io/kubernetes@${KUBE_VERSION}'s go.mod requires no github.com/onsi/ginkgo/v2" >&2; exit 1; }

mkdir -p "$dir/ginkgo-mod" "$bin"
mod="$dir/ginkgo-mod"
k8s_gomod ginkgo-binary ironlb.local/ginkgobuild "github.com/onsi/ginkgo/v2 ${want}" >"$mod/go.mod"
tools_go github.com/onsi/ginkgo/v2/ginkgo >"$mod/tools.go"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
cd "$mod"
echo "ginkgo-binary: resolving modules for the ginkgo CLI ${want} (Kubernetes ${KUBE_VERSION})" >&2
go mod tidy >&2
got=$(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
[ "$got" = "$want" ] || { echo "ginkgo-binary: resolved github.com/onsi/ginkgo/v2 ${got}, Kubernetes pins ${want}" >&2; exit 1; }
start=$(date +%s)
# Into a scratch file first, so that an interrupted build leaves no binary the check above would trust.
tmp=$(mktemp "$bin/.ginkgo.XXXXXX")
trap 'rm -f "$tmp"' EXIT
echo "ginkgo-binary: compiling the ginkgo CLI ${want} into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp" github.com/onsi/ginkgo/v2/ginkgo
chmod 0755 "$tmp"
mv "$tmp" "$bin/ginkgo"
v=$("$bin/ginkgo" version)
case "$v" in *"${want#v}"*) ;; *) echo "ginkgo-binary: built ginkgo says \"$v\", want ${want}" >&2; exit 1 ;; esac
echo "ginkgo-binary: $v built in $(( $(date +%s) - start ))s into $bin" >&2
echo "$key" >"$bin/.ginkgo-complete"
echo "$bin"
