# `make lab` brings the lab up and runs seed 000's experiment; `make test` runs every unit and e2e test.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/ironlb

.PHONY: all build k8s lab lab-down test unit e2e fuzz bench clean

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

# Every unit test, then the e2e tests in the lab (root; they bring their own lab up and down).
test: build k8s unit e2e

unit:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

e2e:
	IRONLB_E2E=1 $(GO) test -count=1 -v -timeout 30m ./test/e2e

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzExpand -fuzztime 20s ./internal/lab/agent
	$(GO) test -run '^$$' -fuzz FuzzImageRepo -fuzztime 20s ./internal/lab/agent

bench: build k8s
	hack/bench-lab.sh

clean:
	rm -rf bin
