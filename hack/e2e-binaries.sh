#!/usr/bin/env bash
# Builds the upstream [sig-network] e2e test binary (e2e.test, from hack/e2esuite: k8s.io/kubernetes'
# test/e2e/network unchanged, under a TestMain like test/e2e/e2e_test.go), agnhost (the image the suite
# runs: netexec, serve-hostname, pause, porter, ...) and regression-issue-74839 (the Conntrack test's
# server for kubernetes#74839, the invalid-conntrack-state bug) from the Go module proxy at the pinned Kubernetes
# version, into a cache outside the repository keyed by that version:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/kubernetes/e2e-<KUBE_VERSION>/bin
# (its own directory, so hack/k8s-binaries.sh's cache stays valid; the lab's agent finds agnhost there).
# It prints that bin directory on its last line. A set built by this script, hack/lib.sh and the suite as
# they are now (a hash of the three, in bin/.complete) is reused; otherwise it is rebuilt in place.
# Progress (packages compiled) is shown on stderr while building.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
key=$(cat "$here/e2e-binaries.sh" "$here/lib.sh" "$here/e2esuite/suite_test.go" | sha256sum | cut -c1-12)
dir="$cache/kubernetes/e2e-${KUBE_VERSION}"
bin="$dir/bin"
if [ "$(cat "$bin/.complete" 2>/dev/null)" = "$key" ]; then echo "$bin"; exit 0; fi
rm -f "$bin/.complete"

mkdir -p "$dir/mod" "$bin"
mod="$dir/mod"
gomod=$(k8s_gomod e2e-binaries ironlb.local/e2ebuild)
echo "$gomod" >"$mod/go.mod"
mkdir -p "$mod/suite"
cp "$here/e2esuite/suite_test.go" "$mod/suite/suite_test.go"
tools_go k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/regression-issue-74839 >"$mod/tools.go"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
cd "$mod"
echo "e2e-binaries: resolving modules for the Kubernetes ${KUBE_VERSION} e2e suite and agnhost" >&2
go mod tidy >&2
ldflags=$(k8s_ldflags)
# The packages e2e.test is made of (but the suite itself, which has only test files): compiled with
# agnhost in one `go build -v`, whose output is the progress; `go test -c` then links from the build cache
# (without vet, which would analyse all ~2000 packages first).
deps=$(go list -deps -test -f '{{if not .ForTest}}{{.ImportPath}}{{end}}' ./suite | grep -v '^ironlb.local/e2ebuild/suite')
images="k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/regression-issue-74839"
# shellcheck disable=SC2086 # images is a list of import paths
total=$( (echo "$deps"; go list -deps $images) | sort -u | wc -l)
echo "e2e-binaries: compiling e2e.test and agnhost (${total} packages)" >&2
start=$(date +%s)
# shellcheck disable=SC2086 # deps is a list of import paths
go build -v -trimpath -ldflags "$ldflags" -o "$bin/" $images $deps 2> >(progress e2e-binaries 100 "$total" "$start" all)
echo "e2e-binaries: linking e2e.test ($(( $(date +%s) - start ))s)" >&2
go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$bin/e2e.test" ./suite
for c in e2e.test agnhost regression-issue-74839; do [ -x "$bin/$c" ] || { echo "e2e-binaries: $c was not built" >&2; exit 1; }; done
"$bin/e2e.test" --version >&2
echo "e2e-binaries: built in $(( $(date +%s) - start ))s into $bin" >&2
echo "$key" >"$bin/.complete"
echo "$bin"
