#!/usr/bin/env bash
# Regenerates what is derived from the API types in api/ (metallb.io, frrk8s.metallb.io):
#   api/*/zz_generated.deepcopy.go   DeepCopy methods
#   config/crd/bases/*.yaml          the CRDs (schemas, defaults, CEL rules, printer columns)
#   config/*/kustomization.yml       the base folders' file lists, and charts/ironlb (hack/genchart)
#   image: tags in config/           VERSION (hack/genchart), as are charts/ironlb/Chart.yaml's version
#                                    (without the v) and appVersion
#   config/prometheus-rules          MetalLB's alerting rules (hack/genchart/rules.go), also in the chart
# Commit the result. api/v1beta1/crd_test.go checks the CRDs against MetalLB's API and
# MetalLB's examples.
#
#   hack/generate.sh           regenerate in place
#   hack/generate.sh --check   regenerate, then fail if that changed any committed file
#                              (for CI: the generated files are stale)
set -euo pipefail

# controller-gen is pinned; `go run pkg@version` builds it in its own module graph, outside go.mod.
CONTROLLER_GEN_VERSION=v0.20.0
controller_gen() { go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_GEN_VERSION}" "$@"; }

cd "$(dirname "$0")/.."

controller_gen object paths=./api/...
# Remove the CRDs first so a kind dropped from the types leaves no stale file behind.
rm -f config/crd/bases/metallb.io_*.yaml config/crd/bases/frrk8s.metallb.io_*.yaml
controller_gen crd paths=./api/... output:crd:dir=./config/crd/bases
# BGPPeer is served as v1beta1 and v1beta2 and converted by the controller's webhook (/convert,
# internal/controller/conversion.go), as MetalLB's is; controller-gen writes no conversion, so it is
# added here (MetalLB: config/crd/patches/crd-conversion-patch-bgppeers.yaml). The controller keeps
# its caBundle; genchart turns the namespace into the chart's.
bgppeers=config/crd/bases/metallb.io_bgppeers.yaml
awk '{ print } /^spec:$/ && !done { done = 1
  print "  conversion:"
  print "    strategy: Webhook"
  print "    webhook:"
  print "      clientConfig:"
  print "        service:"
  print "          name: ironlb-webhook-service"
  print "          namespace: metallb-system"
  print "          path: /convert"
  print "          port: 443"
  print "      conversionReviewVersions:"
  print "      - v1" }' "$bgppeers" > "$bgppeers.tmp"
mv "$bgppeers.tmp" "$bgppeers"
grep -q '^    strategy: Webhook$' "$bgppeers" || { echo "no conversion added to $bgppeers" >&2; exit 1; }
# From config/: the base folders' kustomization.yml (config/default) and the Helm chart charts/ironlb.
go run ./hack/genchart

if [[ "${1:-}" == "--check" ]]; then
  changed=$(git status --porcelain -- api config/crd/bases config/controller config/speaker config/proxy config/prometheus config/prometheus-rules charts)
  if [[ -n "$changed" ]]; then
    echo "generated files are stale; run hack/generate.sh and commit:" >&2
    echo "$changed" >&2
    exit 1
  fi
fi
