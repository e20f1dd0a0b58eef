#!/usr/bin/env bash
# Builds the upstream [sig-network] e2e test binary (e2e.test, from hack/e2esuite: k8s.io/kubernetes'
# test/e2e/network unchanged, under a TestMain like test/e2e/e2e_test.go) and agnhost (the image the suite
# runs: netexec, serve-hostname, pause, porter, ...) from the Go module proxy at the pinned Kubernetes
# version, into a cache outside the repository keyed by that version:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/kubernetes/e2e-<KUBE_VERSION>/bin
# (its own directory, so hack/k8s-binaries.sh's cache stays valid; the lab's agent finds agnhost there).
# It prints that bin directory on its last line. A set built by this script and suite as they are now
# (a hash of both, in bin/.complete) is reused; otherwise it is rebuilt in place. Progress (packages
# compiled) is shown on stderr while building.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
cache=${IRONLB_CACHE:-$HOME/.cache/ironlb}
key=$(cat "$here/e2e-binaries.sh" "$here/e2esuite/suite_test.go" | sha256sum | cut -c1-12)
dir="$cache/kubernetes/e2e-${KUBE_VERSION}"
bin="$dir/bin"
if [ "$(cat "$bin/.complete" 2>/dev/null)" = "$key" ]; then echo "$bin"; exit 0; fi
rm -f "$bin/.complete"

mkdir -p "$dir/mod" "$bin"
mod="$dir/mod"
minor=${KUBE_VERSION#v1.}                # 37.2
staging_ver="v0.${minor}"
kmod=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$kmod" ] || { echo "e2e-binaries: cannot download k8s.io/kubernetes@${KUBE_VERSION}" >&2; exit 1; }
{
  echo "module ironlb.local/e2ebuild"
  echo
  echo "go 1.26.0"
  echo
  echo "require k8s.io/kubernetes ${KUBE_VERSION}"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$kmod" | awk '/=> \.\/staging/ {printf "\t%s => %s %s\n", $1, $1, "'"$staging_ver"'"}'
  echo ")"
} >"$mod/go.mod"
mkdir -p "$mod/suite"
cp "$here/e2esuite/suite_test.go" "$mod/suite/suite_test.go"
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import _ \"k8s.io/kubernetes/test/images/agnhost\""
} >"$mod/tools.go"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
cd "$mod"
echo "e2e-binaries: resolving modules for the Kubernetes ${KUBE_VERSION} e2e suite and agnhost" >&2
go mod tidy >&2
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*} -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor%%.*}"
# The packages e2e.test is made of (but the suite itself, which has only test files): compiled with
# agnhost in one `go build -v`, whose output is the progress; `go test -c` then links from the build cache
# (without vet, which would analyse all ~2000 packages first).
deps=$(go list -deps -test -f '{{if not .ForTest}}{{.ImportPath}}{{end}}' ./suite | grep -v '^ironlb.local/e2ebuild/suite')
total=$( (echo "$deps"; go list -deps k8s.io/kubernetes/test/images/agnhost) | sort -u | wc -l)
echo "e2e-binaries: compiling e2e.test and agnhost (${total} packages)" >&2
start=$(date +%s)
progress() {
  awk -v total="$total" -v start="$start" '
    { n++; if (n % 100 == 0) { cmd = "date +%s"; cmd | getline now; close(cmd);
        printf "e2e-binaries: %d/%d packages compiled (%ds)\n", n, total, now - start > "/dev/stderr"; fflush("/dev/stderr") } }'
}
# shellcheck disable=SC2086 # deps is a list of import paths
go build -v -trimpath -ldflags "$ldflags" -o "$bin/" k8s.io/kubernetes/test/images/agnhost $deps 2> >(progress)
echo "e2e-binaries: linking e2e.test ($(( $(date +%s) - start ))s)" >&2
go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$bin/e2e.test" ./suite
for c in e2e.test agnhost; do [ -x "$bin/$c" ] || { echo "e2e-binaries: $c was not built" >&2; exit 1; }; done
"$bin/e2e.test" --version >&2
echo "e2e-binaries: built in $(( $(date +%s) - start ))s into $bin" >&2
echo "$key" >"$bin/.complete"
echo "$bin"
