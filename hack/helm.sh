#!/usr/bin/env bash
# Builds helm from its Go module at the pinned version (HELM_VERSION in hack/versions.env) into a cache
# outside the repository, beside the Kubernetes binaries:
#   ${IRONLB_CACHE:-$HOME/.cache/ironlb}/helm/<HELM_VERSION>/helm
# `go install pkg@version` resolves helm's own module graph, so ironlb's go.mod does not grow. It prints
# the binary's path on its last line; a cached binary is reused (~4 min cold build on 2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
dir="$cache/helm/${HELM_VERSION}"
if [ -x "$dir/helm" ] && [ -f "$dir/.complete" ]; then echo "$dir/helm"; exit 0; fi
mkdir -p "$dir"
echo "helm: building helm ${HELM_VERSION} from its module into $dir" >&2
start=$(date +%s)
# -v names each package as it is compiled: a line every 50 packages shows a cold build moving.
CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$dir" go install -v -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
  "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" 2> >(progress helm 50 "" "$start" pkgs)
"$dir/helm" version --short >&2
echo "helm: built in $(( $(date +%s) - start ))s" >&2
touch "$dir/.complete"
echo "$dir/helm"
