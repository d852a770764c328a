# kvsim's developer entry points. Plain `make` lists the targets.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 10s
PROPCHECKS ?= 2000
BENCHCOUNT ?= 1
BIN       := bin/kvsim
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/kvsim
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/kvsim

.PHONY: run
run: build ## run kvsim's main job: the default capacity study (configs/studies/default.toml -> out/default)
	./$(BIN) study configs/studies/default.toml

.PHONY: plan-bench
plan-bench: build ## the owner-lane planner micro-benchmark (the seed's case)
	./$(BIN) plan-bench --candidates 2000 --deficit 7877 --cp 8 --seed 1

.PHONY: test
test: ## run the unit, property, golden and CLI tests
	$(GO) test $(PKGS)

.PHONY: invariants
invariants: ## run the tests with the O(n) self-checks on (-tags invariants)
	$(GO) test -tags invariants $(PKGS)

.PHONY: race
race: ## run the tests under the race detector
	$(GO) test -race $(PKGS)

.PHONY: prop
prop: ## run the rapid properties with $(PROPCHECKS) cases each
	@pkgs=$$(grep -l '"pgregory.net/rapid"' $$(git ls-files '*_test.go') | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	echo $(GO) test -run "'Prop|StateMachine'" $$pkgs -args -rapid.checks=$(PROPCHECKS); \
	$(GO) test -run 'Prop|StateMachine' $$pkgs -args -rapid.checks=$(PROPCHECKS)

.PHONY: fuzz
fuzz: ## run every fuzz target for $(FUZZTIME)
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: bench
bench: ## run the Go benchmarks (BENCHCOUNT=10 for benchstat)
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) $(PKGS)

.PHONY: bench-scale
bench-scale: build ## wall time and peak RSS of trace stats, policy and sim on the conversation trace repeated 1x/4x/24x (scripts/bench-scale.sh)
	KVSIM=./$(BIN) bash scripts/bench-scale.sh

.PHONY: bench-scale-ci
bench-scale-ci: build ## the short bench-scale CI runs: kvsim sim at 1x, 4x and 24x, failing if peak RSS grows by more than 80 bytes a request from 1x to 24x (34-42 measured; 42-49 before branch mem19c, main before issue 19's memory round grew 216-249)
	KVSIM=./$(BIN) COPIES="1 4 24" ONLY='^sim$$' MAX_RSS_PER_REQ=80 bash scripts/bench-scale.sh

.PHONY: golden
golden: ## rewrite golden files (review the diff before committing)
	@pkgs=$$(grep -l '"github.com/kvsim/kvsim/internal/golden"' $$(git ls-files '*_test.go') | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	echo $(GO) test $$pkgs -args -update; \
	$(GO) test $$pkgs -args -update

.PHONY: lint
lint: ## gofmt, go vet and the repository lint tests
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) test ./internal/lint

.PHONY: tidy-check
tidy-check: ## fail if go mod tidy changes go.mod or go.sum
	$(GO) mod tidy
	@git diff --exit-code -- go.mod go.sum || { echo "go mod tidy changed go.mod/go.sum"; exit 1; }

.PHONY: e2e-real
e2e-real: ## end-to-end checks against a real llama-server (root; Debian sid chroot + tiny model); skips loudly if the Debian mirror lacks llama.cpp
	bash e2e/run.sh

.PHONY: e2e-slurm
e2e-slurm: ## the default study on a real one-node Slurm cluster started here (root): 4 array tasks + merge, one task cancelled and resubmitted; byte-identical to one machine; skips loudly if Debian lacks slurm-wlm
	bash e2e/slurm/run.sh

.PHONY: docker-build-check
docker-build-check: ## build bin/kvsim-static with deploy/k8s/Dockerfile's own build line (no container runtime needed) and check it is static and finds the studies' files
	bash deploy/k8s/build-check.sh

.PHONY: faults
faults: ## the fault-injection suites: bad inputs, full disks, /dev/full, signals (e2e/faults; root mounts a tmpfs); faulty servers under -race
	$(GO) test -tags faults -count=1 -timeout 15m ./e2e/faults/
	$(GO) test -race -count=1 -run 'TestFaultSuite|TestCapture' ./replay/

.PHONY: golden-check
golden-check: golden ## fail if rewriting the golden files changes any
	@git diff --exit-code -- '*.golden' '*.err' || { echo "golden files are stale: run make golden and review the diff"; exit 1; }

.PHONY: ci
ci: lint tidy-check test invariants golden-check faults bench-scale-ci ## what .ci/run runs

.PHONY: clean
clean: ## remove build outputs
	rm -rf bin out
