#!/usr/bin/env bash
# Builds MetalLB's controller and speaker from its Go module at the pinned version (METALLB_VERSION in
# hack/versions.env) into a cache outside the repository:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/metallb-<METALLB_VERSION>/{controller,speaker}
# The migration test (internal/controller, TestMigrationFromMetalLB) runs that controller, the
# benchmarks (make bench-controller, bench-l2) both. `go install pkg@version` resolves MetalLB's own
# module graph, so ironlb's go.mod does not grow. It prints the directory on its last line; cached
# binaries are reused (a cold build takes a few minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
dir="$cache/metallb-${METALLB_VERSION}"
if [ -x "$dir/controller" ] && [ -x "$dir/speaker" ]; then echo "$dir"; exit 0; fi
mkdir -p "$dir"
echo "metallb: building MetalLB ${METALLB_VERSION}'s controller and speaker from its module into $dir" >&2
# Into a scratch GOBIN first, so that an interrupted build leaves no binary the check above would trust.
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$tmp" go install \
  "go.universe.tf/metallb/controller@${METALLB_VERSION}" "go.universe.tf/metallb/speaker@${METALLB_VERSION}"
mv "$tmp/controller" "$tmp/speaker" "$dir/"
echo "$dir"
