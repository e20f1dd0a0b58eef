# `make lab` brings the lab up and runs seed 000's experiment; `make test` runs every unit and e2e test.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/ironlb

.PHONY: all build k8s lab lab-down test unit race-toolchain e2e fuzz fuzz-short bench bench-controller bench-l2 metallb clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/ironlb

# Kubernetes binaries at the pinned versions (hack/versions.env), cached outside the repo.
k8s:
	@hack/k8s-binaries.sh >/dev/null

lab: build k8s
	$(BIN) lab up
	IRONLB=$(BIN) hack/seed-000.sh

lab-down: build
	$(BIN) lab down

# Every unit test, every fuzz target briefly, then the e2e tests in the lab (root; they bring their own
# lab up and down). The unit tests include the migration from MetalLB, which runs MetalLB's controller.
test: build k8s metallb unit fuzz-short e2e

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
	IRONLB_E2E=1 $(GO) test -count=1 -v -timeout 30m ./test/e2e

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

bench: build k8s
	hack/bench-lab.sh
	$(GO) test -run '^$$' -bench 'BenchmarkAllocate/' -benchtime 100000x -count 3 ./internal/allocator
	$(GO) test -run '^$$' -bench 'BenchmarkAllocate10k' -benchtime 5x -count 3 ./internal/allocator

# MetalLB's controller and speaker (METALLB_VERSION in hack/versions.env), built from its module and
# cached outside the repo: the migration test starts from its controller, the benchmarks compare against both.
metallb:
	@hack/metallb.sh >/dev/null

# 10,000 LoadBalancer Services: ironlb's controller against MetalLB v0.16.1's (built from its module).
bench-controller: k8s metallb
	IRONLB_BENCH=1 IRONLB_BENCH_SERVICES=10000 $(GO) test -count=1 -run TestScaleVsMetalLB -v -timeout 90m ./internal/controller

# Layer-2 failover and false alarms, ironlb against MetalLB v0.16.1 (about 70 minutes).
bench-l2: build k8s metallb
	$(BIN) lab up
	$(BIN) lab bench-failover --trials 20
	$(BIN) lab bench-failover --trials 20 --speaker metallb --memberlist default
	$(BIN) lab bench-failover --trials 20 --speaker metallb --memberlist tuned
	$(BIN) lab bench-soak --duration 10m
	$(BIN) lab bench-soak --duration 10m --speaker metallb --memberlist tuned
	$(BIN) lab bench-soak --duration 10m --speaker metallb --memberlist default
	$(BIN) lab down

clean:
	rm -rf bin
