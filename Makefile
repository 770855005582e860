# The project's commands. `make demo` runs against a real local cluster; `make test` runs
# every test. See README.md.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

TESTENV_DIR := $(CURDIR)/target/testenv
TESTENV_BIN := $(TESTENV_DIR)/bin
TESTENV := $(TESTENV_BIN)/testenv
KUBECONFIG_TESTENV := $(TESTENV_DIR)/kubeconfig
# The Go sources and module files the testenv binaries are built from; a change to any of
# them, and only that, triggers a rebuild.
TESTENV_SRC := testenv/go.mod testenv/go.sum testenv/build.sh $(shell find testenv -name '*.go')

# Cluster tests find the cluster and a kubectl of the same version through these.
export TESTENV_KUBECONFIG := $(KUBECONFIG_TESTENV)
export TESTENV_KUBECTL := $(TESTENV_BIN)/kubectl

.PHONY: all demo test test-unit test-cluster test-browser soak lint fmt cluster cluster-down cluster-status \
	testenv bench bench-decode bench-queue bench-informer bench-runtime bench-operator bench-shard bench-latency \
	bench-failover bench-pods \
	protoschema manifests install uninstall run dist deploy undeploy fuzz fuzz-smoke

all: lint test-unit

## demo: start the real local cluster and run the Memcached operator against it: create,
## scale, hand-edit and delete a Memcached, then stop the operator (hack/demo.sh); prints the
## address of its live debug page (/debug/controllers) while it runs
demo: cluster
	hack/demo.sh

## test: lint, unit tests (the fuzz corpus replay among them), a few seconds of each fuzz target
## where nightly and cargo-fuzz are present, then the cluster tests and the browser test against
## a cluster each starts and stops
test: lint test-unit fuzz-smoke test-cluster test-browser

## test-unit: the fast tier: unit, scripted and doc tests (tests/fuzz_corpus.rs replays the fuzz
## corpus on stable), and the orchestrator's Go tests; no cluster
test-unit:
	cargo test --workspace
	cd testenv && go test -v ./...
	cd tools/protoschema && go test -v ./...

# Seconds each fuzz target runs for in `make fuzz`, and in `make test`'s short run.
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 5

## fuzz: run every fuzz target (fuzz/) with cargo-fuzz on nightly for FUZZ_SECONDS each
## (installs cargo-fuzz into target/tools if missing); ends with a table: target, runs,
## seconds, crashes. A crash fails the target; see hack/fuzz.sh for making it a regression
fuzz:
	hack/fuzz.sh $(FUZZ_SECONDS) --install

## fuzz-smoke: every fuzz target for FUZZ_SMOKE_SECONDS each, if nightly and cargo-fuzz are
## present (else says so: the corpus replay in test-unit still ran); installs nothing
fuzz-smoke:
	hack/fuzz.sh $(FUZZ_SMOKE_SECONDS) --smoke

## test-cluster: the cluster tests (#[ignore = "needs cluster"]); starts a cluster if none runs
## and stops it afterwards, even when a test fails; a cluster that was already up is left up
test-cluster: testenv
	@if $(TESTENV) status --dir $(TESTENV_DIR) >/dev/null 2>&1; then \
	  echo "test-cluster: using the running cluster"; started=0; \
	else \
	  $(TESTENV) up --dir $(TESTENV_DIR); started=1; \
	fi; \
	rc=0; cargo test --workspace --tests --no-fail-fast -- --ignored --test-threads=4 \
	  --skip the_debug_page_shows || rc=$$?; \
	if [ $$started = 1 ]; then $(TESTENV) down --dir $(TESTENV_DIR) || rc=1; fi; \
	exit $$rc

## test-browser: headless Chromium (Debian's `chromium`, or $$CHROMIUM) drives the operator's
## /debug/controllers page on the local cluster (cmd/memcached-operator/tests/debug_page.rs):
## a failing key's growing failures and next retry, its recovery, the caches against kubectl;
## screenshots in target/debug-page/. Starts a cluster if none runs, as test-cluster does
test-browser: testenv
	@command -v $${CHROMIUM:-chromium} >/dev/null || { echo "test-browser: no chromium (apt-get install chromium)" >&2; exit 1; }
	@if $(TESTENV) status --dir $(TESTENV_DIR) >/dev/null 2>&1; then \
	  echo "test-browser: using the running cluster"; started=0; \
	else \
	  $(TESTENV) up --dir $(TESTENV_DIR); started=1; \
	fi; \
	rc=0; cargo test -p memcached-operator --test debug_page -- --ignored --nocapture || rc=$$?; \
	if [ $$started = 1 ]; then $(TESTENV) down --dir $(TESTENV_DIR) || rc=1; fi; \
	exit $$rc

## soak: the operator and an informer through the fault proxy (cmd/memcached-operator/tests/
## faults.rs) for SOAK_SECONDS (default 300) at heavy fault rates, printing the faults survived
## per kind; FAULT_SEED=<n> replays a run. Starts a cluster if none runs, as test-cluster does
soak: testenv
	@if $(TESTENV) status --dir $(TESTENV_DIR) >/dev/null 2>&1; then \
	  echo "soak: using the running cluster"; started=0; \
	else \
	  $(TESTENV) up --dir $(TESTENV_DIR); started=1; \
	fi; \
	rc=0; SOAK_SECONDS=$${SOAK_SECONDS:-300} cargo test -p memcached-operator --test faults -- \
	  --ignored --exact --nocapture soak_the_operator_and_an_informer_under_heavy_faults || rc=$$?; \
	if [ $$started = 1 ]; then $(TESTENV) down --dir $(TESTENV_DIR) || rc=1; fi; \
	exit $$rc

## lint: formatting, clippy and docs, all with warnings denied
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
	cd testenv && test -z "$$(gofmt -l .)" && go vet ./...
	cd benches/clientgo && test -z "$$(gofmt -l .)" && go vet ./...
	cd tools/protoschema && test -z "$$(gofmt -l .)" && go vet ./...

fmt:
	cargo fmt --all
	cd testenv && gofmt -w .
	cd tools/protoschema && gofmt -w .

## manifests: regenerate config/crd/bases/ from the operator's Rust types, and
## config/rbac/role.yaml from its controller's rules (each written whole, or left as it was)
manifests:
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cargo run -q -p memcached-operator -- crd > "$$tmp/crd.yaml"; \
	cargo run -q -p memcached-operator -- rbac > "$$tmp/role.yaml"; \
	mv "$$tmp/crd.yaml" config/crd/bases/cache.example.com_memcacheds.yaml; \
	mv "$$tmp/role.yaml" config/rbac/role.yaml

# The operator's deployment targets act on the current kubeconfig's cluster (KUBECONFIG or
# ~/.kube/config), not on testenv's unless KUBECONFIG names it.
KUBECTL ?= kubectl
# The operator's image for `make deploy` (see Dockerfile for building it).
IMG ?= controller:latest
# Where `make deploy` writes its kustomize overlay, CA and webhook certificate.
DEPLOY_DIR := $(CURDIR)/target/deploy
# Flags for `make run`, e.g. RUN_ARGS="--namespace=demo --log-level=debug".
RUN_ARGS ?=
# Flags for `make bench-runtime` and `make bench-operator`, e.g. BENCH_ARGS=--read-your-writes
# (each also with read-your-own-writes the other way: ours off, controller-runtime's on).
BENCH_ARGS ?=

## install: install the Memcached CRD into the current kubeconfig's cluster
install:
	$(KUBECTL) apply -f config/crd/bases

## uninstall: remove the Memcached CRD (and with it every Memcached) from the current cluster
uninstall:
	$(KUBECTL) delete -f config/crd/bases --ignore-not-found

## run: run the operator in the foreground against the current kubeconfig (flags in RUN_ARGS)
run:
	cargo run --release -p memcached-operator -- $(RUN_ARGS)

## dist: build the operator as the image ships it (hack/build-dist.sh: the dist profile,
## linked statically) and print its path
dist:
	hack/build-dist.sh

## deploy: deploy the operator (CRD, RBAC, manager, webhooks) with image IMG to the current
## cluster, with a generated webhook certificate (config/deploy-overlay.sh, into target/deploy)
deploy:
	config/deploy-overlay.sh "$(IMG)" $(DEPLOY_DIR)
	$(KUBECTL) apply -k $(DEPLOY_DIR)

## undeploy: remove everything `make deploy` made, its namespace and the CRD included
undeploy:
	$(KUBECTL) delete -k config/default --ignore-not-found

## protoschema: regenerate src/client/codec/proto_tables.rs (protobuf field tables) from k8s.io/api
protoschema:
	cd tools/protoschema && go run . ../../src/client/codec/proto_tables.rs

## cluster: start the real local cluster (or report the running one); writes target/testenv/kubeconfig
cluster: testenv
	$(TESTENV) up --dir $(TESTENV_DIR)

## cluster-down: stop every process `make cluster` started; safe to run twice
cluster-down:
	@if [ -x $(TESTENV_BIN)/testenv ]; then $(TESTENV) down --dir $(TESTENV_DIR); else echo "testenv: not built; nothing to stop"; fi

cluster-status: testenv
	$(TESTENV) status --dir $(TESTENV_DIR)

## testenv: build the cluster's binaries, only when the Go sources or go.sum changed
testenv: $(TESTENV_BIN)/.built

$(TESTENV_BIN)/.built: $(TESTENV_SRC)
	testenv/build.sh $(TESTENV_BIN)
	touch $@

## bench: every criterion bench
bench:
	cargo bench --workspace

## bench-decode: watch decode throughput on one core; last line `watch decode events/s: N`
bench-decode:
	benches/bench-decode.sh

## bench-queue: our workqueue against client-go's on the same workloads, in one run (7 rounds);
## last line `min ratio ours/client-go: X.XX`. See BENCHMARKS.md
bench-queue:
	python3 benches/bench-queue.py

## bench-informer: our informer against client-go's on the local cluster (starts it if needed,
## seeds 10,000 ConfigMaps and 1,000 Pods, 7 rounds); last line
## `informer sync ours/client-go: X.XX, bytes per object ours/client-go: Y.YY`. See BENCHMARKS.md
bench-informer:
	python3 benches/bench-informer.py

## bench-runtime: our manager against controller-runtime's, a no-op controller over 10,000
## ConfigMaps on the local cluster (starts it if needed, seeds, 7 rounds); last line
## `runtime ours/controller-runtime: start-to-all-reconciled X.XX, rss Y.YY`. See BENCHMARKS.md
bench-runtime:
	python3 benches/bench-runtime.py $(BENCH_ARGS)

## bench-operator: the Memcached operator against the same operator on controller-runtime, on the
## local cluster (starts it if needed; 3 alternating rounds: start, 200 size patches, 1,000
## Memcacheds of size 0 created → converged); last line
## `operator ours/controller-runtime: p99 X.XX, rss Y.YY, start Z.ZZ, bulk W.WW`.
## See BENCHMARKS.md
bench-operator:
	python3 benches/bench-operator.py $(BENCH_ARGS)

## bench-shard: sharded operators, 3 replicas (one SIGKILLed and one added mid-run) against 1,
## over 3,000 Memcacheds of size 0 with a 50 ms outside wait per reconcile, on the local
## cluster; last line `shard 3/1: throughput X.XX, largest share Y.YY, overlaps N, takeover Z.Zs`.
## See BENCHMARKS.md
bench-shard: cluster
	python3 benches/bench-shard.py $(BENCH_ARGS)

## bench-latency: live edits (20/s) against a restarted controller draining its initial list of
## 10,000 ConfigMaps, ours against controller-runtime's priority queue, on the local cluster
## (starts it if needed, seeds, 3 alternating rounds); last line
## `latency ours/controller-runtime: live p99 X.XX, longest initial wait Y.YY`; its figures are
## defined in benches/bench-latency.py
bench-latency:
	python3 benches/bench-latency.py

## bench-failover: two Memcached operator processes with leader election (default durations) on
## the local cluster (starts it if needed); the leader stopped with SIGTERM, then SIGKILL, 5
## alternating rounds; last line `failover handover: sigterm X.XXs, sigkill Y.YYs (lease + retry
## = Z.ZZs)`: the median time from the signal to the standby leading
bench-failover:
	python3 benches/bench-failover.py $(BENCH_ARGS)

## bench-pods: one informer over 100,000 kwok Pods (managedFields stripped), ours against
## client-go's, in one run (3 rounds): settled bytes per Pod and the peak during the initial
## sync, sampled from /proc; creates the Pods and deletes them at the end. Last line
## `pods 100k ours/client-go: settled X.XX; ours peak/settled Y.YY`. See BENCHMARKS.md
bench-pods:
	python3 benches/bench-pods.py $(BENCH_ARGS)
