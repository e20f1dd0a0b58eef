#!/usr/bin/env bash
# Builds the OCI distribution registry (github.com/distribution/distribution/v3, cmd/registry) from the
# Go module proxy at the pinned version (REGISTRY_VERSION in hack/versions.env) into a cache outside the
# repository, beside the Kubernetes binaries:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/registry/<REGISTRY_VERSION>/bin/registry
# The lab runs it in its own namespace (`ironlb lab up --registry`, the default); the registry test of
# internal/testbed/lab runs it too. It prints the bin directory on its last line; a cached binary is
# reused (a cold build takes a few minutes on 2 cores), nothing is rebuilt unless the pin changes.
#
# `go install pkg@version` builds from the module's own go.mod (it has no replace directives, so this
# works and resolves exactly the graph the registry's authors tested), and ironlb's go.mod does not grow:
# the same result as a generated helper module, with nothing to generate.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
bin="$cache/registry/${REGISTRY_VERSION}/bin"
if [ -x "$bin/registry" ] && [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"
mod=github.com/distribution/distribution/v3
echo "registry-binary: building the distribution registry ${REGISTRY_VERSION} from the module proxy into $bin" >&2
# Into a scratch GOBIN first, so that an interrupted build leaves no binary the check above would trust.
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# -v names each package as it is compiled: a line every 50 packages shows a cold build moving.
CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$tmp" go install -v -trimpath \
  -ldflags "-s -w -X ${mod}/version.version=${REGISTRY_VERSION}" "${mod}/cmd/registry@${REGISTRY_VERSION}" 2> >(progress registry-binary 50 "" "$start" pkgs)
mv "$tmp/registry" "$bin/registry"
"$bin/registry" --version >&2
echo "registry-binary: built in $(( $(date +%s) - start ))s into $bin" >&2
touch "$bin/.complete"
echo "$bin"
