# `make lab` brings the lab up and runs seed 000's experiment; `make test` runs every unit and e2e test.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/ironlb

# The release version (VERSION: also the image tag, the manifests' tag and the chart's appVersion, set
# by hack/generate.sh) and the commit, "-dirty" when the tree has changes, stamped into the binary
# (`ironlb version`). SOURCE_DATE_EPOCH, the commit's time, is the image's only time stamp. COMMIT and
# LDFLAGS are expanded when a recipe runs, not when make starts: on a fresh machine git is installed by
# the first prerequisite (deps), and a commit read before it would be empty.
VERSION           := $(shell cat VERSION)
COMMIT             = $(shell git rev-parse HEAD 2>/dev/null)$(shell [ -z "$$(git status --porcelain 2>/dev/null)" ] || echo -dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS            = -X github.com/ironlb/ironlb/internal/version.version=$(VERSION) -X github.com/ironlb/ironlb/internal/version.commit=$(COMMIT)

# make image: ironlb's OCI image for PLATFORMS, written as an OCI layout to bin/image; PUSH=REF also
# pushes it (REF without a tag gets VERSION), INSECURE=1 over plain HTTP. When a lab with a registry is
# up (its record in LAB_DIR names one), it is also pushed there (`ironlb lab push`): LAB_PUSH=0 skips
# that. docs/image.md.
PLATFORMS ?= linux/amd64 linux/arm64
IMAGE     ?= ghcr.io/ironlb/ironlb
PUSH      ?=
INSECURE  ?=
LAB_PUSH  ?= 1
LAB_DIR   ?= $(or $(IRONLB_LAB_DIR),/run/ironlb-lab)

.PHONY: all deps build image chart k8s registry coredns lab lab-down test unit race-toolchain e2e fuzz fuzz-short bench bench-controller bench-l2 differential metallb helm e2e-binaries conformance clean

all: build

# -v names each package as it is compiled (none when the cache is warm): hack/lib.sh's progress prints a
# line every 100, so the first build on a fresh machine (~900 packages, minutes) is seen moving.
# Static (CGO_ENABLED=0): `lab up` builds ironlb's image from this binary, and the image has no C library.
build:
	@echo 'CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ironlb'
	@here=hack; . hack/lib.sh; start=$$(date +%s); \
	  CGO_ENABLED=0 $(GO) build -v -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ironlb 2> >(progress build 100 "" "$$start" pkgs)

# Static binaries (CGO_ENABLED=0), without paths of this machine (-trimpath) or symbols (-s -w): the
# same commit gives the same bytes, so the same image digest.
image:
	@set -e; for p in $(PLATFORMS); do \
	  echo "== go build $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/$${p%/*}_$${p#*/}/ironlb ./cmd/ironlb; \
	done
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/image --version $(VERSION) --commit $(COMMIT) --repo $(IMAGE) --out bin/image \
	  $(foreach p,$(PLATFORMS),--binary $(p)=bin/$(subst /,_,$(p))/ironlb) \
	  $(if $(PUSH),--push $(PUSH)) $(if $(INSECURE),--insecure)
	@if [ "$(LAB_PUSH)" = 1 ] && grep -qs '"registry": {' $(LAB_DIR)/lab.json; then \
	  $(MAKE) --no-print-directory build && echo "== ironlb lab push (a lab with a registry is up)" && $(BIN) lab push --state-dir $(LAB_DIR) --from bin/image; \
	fi

# The Debian packages the lab and the tests use (iproute2, nftables, FRR, arping, gcc for -race, ...),
# installed when missing: a fresh Debian machine with Go needs nothing else (hack/deps.sh, also run by CI).
deps:
	@hack/deps.sh

# Kubernetes binaries at the pinned versions (hack/versions.env), cached outside the repo.
k8s:
	@hack/k8s-binaries.sh >/dev/null

# The OCI distribution registry the lab runs (REGISTRY_VERSION in hack/versions.env), built from its
# module and cached beside them.
registry:
	@hack/registry-binary.sh >/dev/null

# The upstream [sig-network] e2e suite (e2e.test) and agnhost at the pinned Kubernetes version, cached
# beside the Kubernetes binaries (hack/e2e-binaries.sh; the lab's agent runs agnhost for the suite's
# images), and the ginkgo CLI at the version Kubernetes pins (hack/ginkgo-binary.sh), which runs the suite
# in parallel processes (`lab conformance --procs`). A prerequisite of `make test`: the e2e suite runs the [Conformance] Services and Networking
# tests on its ironlb-proxy lab (test/e2e/conformance_test.go).
e2e-binaries:
	@hack/e2e-binaries.sh >/dev/null
	@hack/ginkgo-binary.sh >/dev/null

# The [sig-network] suite on a kube-proxy (nftables) lab and on an ironlb-proxy lab, side by side:
# `ironlb lab conformance --compare` brings each lab up and down (no lab may be up). Root; run by hand.
# CONFORMANCE_FLAGS adds flags (--focus, --skip, --report-dir). docs/conformance.md.
CONFORMANCE_FLAGS ?=
conformance: deps build k8s registry coredns e2e-binaries helm chart
	$(BIN) lab conformance --compare $(CONFORMANCE_FLAGS)

# CoreDNS (COREDNS_VERSION in hack/versions.env) with the plugins a cluster uses, the lab's cluster DNS,
# built from its module and cached beside them.
coredns:
	@hack/coredns-binary.sh >/dev/null

lab: deps build k8s registry coredns chart
	$(BIN) lab up --chart $(CHART_DIR)
	IRONLB=$(BIN) hack/seed-000.sh

lab-down: build
	$(BIN) lab down

# Every unit test, every fuzz target briefly, then the e2e tests in the lab (root; they bring their own
# lab up and down). The unit tests include the migration from MetalLB, which runs MetalLB's controller.
test: deps build k8s registry coredns metallb helm e2e-binaries unit fuzz-short e2e

# The unit tests run under the race detector, which needs cgo: a C compiler (gcc) and libc's headers
# (Debian: gcc, libc6-dev; .ci/run installs them). -race makes the CPU-bound tests 4-8x slower
# (allocator's properties, nftrules, nftapply: 375 s, 298 s, 249 s on a loaded 2-core machine), hence a
# per-package timeout above go test's default 10 min.
unit: race-toolchain
	$(GO) vet ./...
	hack/generate.sh --check
	$(GO) test -race -count=1 -timeout 20m ./...

race-toolchain:
	@command -v "$$($(GO) env CC)" >/dev/null 2>&1 || { echo "make: the unit tests run with -race, which needs cgo and a C compiler: '$$($(GO) env CC)' is not installed (Debian: apt-get install gcc libc6-dev)" >&2; exit 1; }
	@[ "$$($(GO) env CGO_ENABLED)" = 1 ] || { echo "make: the unit tests run with -race, which needs cgo: CGO_ENABLED is not 1" >&2; exit 1; }

e2e:
	IRONLB_E2E=1 $(GO) test -count=1 -v -timeout 45m ./test/e2e

# Every fuzz target for FUZZTIME each (packages found by their `func Fuzz`, so that the others are not
# compiled for nothing). A failing input stops the run and is saved by Go as
# <package>/testdata/fuzz/<target>/<hash>: commit it, and every later `go test` replays it. A run that
# fails without writing an input (the engine's "context deadline exceeded" under load) is run once more.
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; \
	    before=$$(ls $$pkg/testdata/fuzz/$$f 2>/dev/null | wc -l); \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg && continue; \
	    if [ "$$(ls $$pkg/testdata/fuzz/$$f 2>/dev/null | wc -l)" != "$$before" ]; then exit 1; fi; \
	    echo "== $$f failed without a failing input (the engine's own timeout on a busy machine): once more"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The short pass `make test` runs: every fuzz target for 3 s.
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=3s

bench: build k8s registry coredns
	hack/bench-lab.sh
	$(GO) test -run '^$$' -bench 'BenchmarkAllocate/' -benchtime 100000x -count 3 ./internal/allocator
	$(GO) test -run '^$$' -bench 'BenchmarkAllocate10k' -benchtime 5x -count 3 ./internal/allocator

# MetalLB's controller and speaker (METALLB_VERSION in hack/versions.env), built from its module and
# cached outside the repo: the migration test starts from its controller, the benchmarks compare against both.
metallb:
	@hack/metallb.sh >/dev/null

# helm at its pinned version, for the chart test (config/install_test.go) and `lab up`, which installs
# ironlb with it.
helm:
	@hack/helm.sh >/dev/null

# make chart: charts/ironlb packaged by `helm package` (chart version VERSION without its v, appVersion
# VERSION) into CHART_DIR/ironlb-<version>.tgz, which `lab up` pushes to the lab's registry (helm push,
# an OCI artifact) and installs from. helm stamps every file with the time of packaging, so the archive
# is rewritten as it was (the same files, in name order) with SOURCE_DATE_EPOCH's time, numeric owners
# and no gzip time: one commit gives the same bytes (it prints the sha256).
CHART_DIR ?= bin/chart
chart: helm
	@set -e; helm=$$(hack/helm.sh); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	HELM_CACHE_HOME=$$tmp/h HELM_CONFIG_HOME=$$tmp/h HELM_DATA_HOME=$$tmp/h \
	  $$helm package charts/ironlb --version $(VERSION:v%=%) --app-version $(VERSION) -d $$tmp/out >/dev/null; \
	f=$$(ls $$tmp/out/*.tgz); mkdir $$tmp/x; tar -xzf $$f -C $$tmp/x; \
	rm -rf $(CHART_DIR); mkdir -p $(CHART_DIR); \
	(cd $$tmp/x && find . -type f | sed 's,^\./,,' | LC_ALL=C sort | \
	  tar --no-recursion -T - --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner --mode=a+r,go-w -cf -) | \
	  gzip -9n > $(CHART_DIR)/$$(basename $$f); \
	echo "== chart $(CHART_DIR)/$$(basename $$f) sha256:$$(sha256sum < $(CHART_DIR)/$$(basename $$f) | cut -d' ' -f1)"

# 10,000 LoadBalancer Services: ironlb's controller against MetalLB v0.16.1's (built from its module).
bench-controller: k8s metallb
	IRONLB_BENCH=1 IRONLB_BENCH_SERVICES=10000 $(GO) test -count=1 -run TestScaleVsMetalLB -v -timeout 90m ./internal/controller

# MetalLB as the judge (issue 20): DIFF_ADMISSION admission cases and DIFF_SEQUENCES allocation
# sequences, each applied to an apiserver with MetalLB v0.16.1's controller and webhook and to one with
# ironlb's; every answer must agree but for the intended differences docs/controller.md lists.
# DIFF_SEED=N replays a run (each run logs its seed). `make unit` runs the same tests at 400 and 40.
DIFF_ADMISSION ?= 10000
DIFF_SEQUENCES ?= 1000
DIFF_SEED      ?=
differential: k8s metallb
	IRONLB_DIFF_ADMISSION=$(DIFF_ADMISSION) IRONLB_DIFF_SEQUENCES=$(DIFF_SEQUENCES) $(if $(DIFF_SEED),IRONLB_DIFF_SEED=$(DIFF_SEED)) \
	  $(GO) test -count=1 -run '^TestDifferential' -v -timeout 90m ./internal/controller 2>&1 | grep -v '^time='; exit $${PIPESTATUS[0]}

# Layer-2 failover and false alarms, ironlb against MetalLB v0.16.1 (about 70 minutes). The failover
# runs' results and pictures go to $(PLOTS) (docs/benchmarks.md, "Drawing the pictures").
PLOTS ?= bin/plots
bench-l2: build k8s registry coredns metallb
	$(BIN) lab up
	$(BIN) lab bench-failover --trials 20 --plot $(PLOTS)
	$(BIN) lab bench-failover --trials 20 --speaker metallb --memberlist default --plot $(PLOTS)
	$(BIN) lab bench-failover --trials 20 --speaker metallb --memberlist tuned --plot $(PLOTS)
	$(BIN) lab bench-soak --duration 10m
	$(BIN) lab bench-soak --duration 10m --speaker metallb --memberlist tuned
	$(BIN) lab bench-soak --duration 10m --speaker metallb --memberlist default
	$(BIN) lab down

clean:
	rm -rf bin
