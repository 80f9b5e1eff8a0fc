# kvconnect: the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
TOOLS := $(CURDIR)/.tools
# The out-of-tree example plugin: a module of its own, tested and linted too.
EXAMPLE_PLUGIN := examples/transport-plugin
export PATH := $(TOOLS):$(PATH)
# Race-enabled binaries otherwise sleep 1 s at exit; plugin processes exit often in tests.
export GORACE ?= atexit_sleep_ms=0

PROTOC_VERSION := 3.21.12
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION := v0.8.2

# Debian packages the build, tests and code generation need: protoc, the
# native transports' libraries, the runtime libraries of the Mooncake
# Transfer Engine binaries the interop tests run (../shared/mooncake/bin),
# real etcd and Redis servers for the metadata tests, and iproute2 for
# the multi-host tests in network namespaces, and prometheus for promtool
# (the example alert rules' unit tests).
DEB_PACKAGES := protobuf-compiler pkg-config libibverbs-dev libucx-dev libfabric-dev \
	libgoogle-glog0v6 libgflags2.2 libjsoncpp25 libnuma1 libibverbs1 libunwind8 \
	etcd-server redis-server iproute2 prometheus gcc libc6-dev python3 python3-venv

.PHONY: all deps build lib python generate check-generate demo test test-long test-short test-python lint fuzz clean

all: build

## deps: install Debian packages (idempotent) and Go modules
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	$(GO) mod download
	cd $(EXAMPLE_PLUGIN) && $(GO) mod download

## build: build the CLI, every plugin binary, the examples and the C library into bin/
build: lib
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/...

## lib: the C library bin/libkvconnect.so and its header bin/kvconnect.h (docs/C-API.md)
lib:
	@mkdir -p $(BIN)
	$(GO) build -buildmode=c-shared -o $(BIN)/libkvconnect.so ./bindings/c
	@rm -f $(BIN)/libkvconnect.h
	cp bindings/c/include/kvconnect.h $(BIN)/kvconnect.h

# The Python wheels bundle stripped binaries (no symbol tables, no DWARF).
PY_NATIVE := $(CURDIR)/python/build/native
PY_PYTHON ?= python3

## python: the wheels kvconnect (engine, library, CLI, plugins) and kvconnect-mooncake
## (mooncake.engine) into dist/; pip install --no-index dist/*.whl is all a user needs (docs/PYTHON.md)
python:
	@mkdir -p $(PY_NATIVE) dist
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags "-s -w" -buildmode=c-shared -o $(PY_NATIVE)/libkvconnect.so ./bindings/c
	@rm -f $(PY_NATIVE)/libkvconnect.h
	$(GO) build -trimpath -ldflags "-s -w" -o $(PY_NATIVE)/ ./cmd/kvconnect ./cmd/kvconnect-transport-*
	$(PY_PYTHON) python/build_wheels.py --native $(PY_NATIVE) --out dist

$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

## generate: regenerate internal/pluginrpc/proto from transport.proto (protoc $(PROTOC_VERSION), pinned plugins)
generate: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc
	@command -v protoc >/dev/null || { echo "protoc not found: run make deps"; exit 1; }
	@v=$$(protoc --version | awk '{print $$2}'); [ "$$v" = "$(PROTOC_VERSION)" ] || \
		{ echo "protoc $$v found, $(PROTOC_VERSION) needed for byte-identical output (Debian bookworm's protobuf-compiler)"; exit 1; }
	protoc -I internal/pluginrpc/proto \
		--go_out=paths=source_relative:internal/pluginrpc/proto \
		--go-grpc_out=paths=source_relative:internal/pluginrpc/proto \
		internal/pluginrpc/proto/transport.proto

## check-generate: fail if the checked-in generated code differs from make generate
check-generate: generate
	@git diff --exit-code -- internal/pluginrpc/proto || { echo "internal/pluginrpc/proto is out of date: run make generate and commit"; exit 1; }

## demo: build everything and run the prefill/decode demo on loopback
demo: build
	$(BIN)/pd-disagg

# The Mooncake Transfer Engine binaries the interop tests and benchmarks
# run against, when ../shared/mooncake/bin is there (override with
# KVCONNECT_MOONCAKE_BIN=dir).
MOONCAKE_BIN_DEFAULT := $(wildcard $(CURDIR)/../shared/mooncake/bin)
export KVCONNECT_MOONCAKE_BIN ?= $(MOONCAKE_BIN_DEFAULT)

## bench: the benchmark suite on loopback (raw Go TCP baseline, tcp as a plugin and in-process, every
## other transport built here), BENCH_ROUNDS rounds, then the Python engine against the Go API and
## Mooncake (python/bench); prints the tables and writes docs/PERFORMANCE.md
BENCH_ROUNDS ?= 5
.PHONY: bench
bench: build
	gcc -O2 -Wall -o $(BIN)/kvconnect-pingpong cmd/kvconnect/internal/bench/floor/pingpong.c
	$(BIN)/kvconnect bench --suite --rounds $(BENCH_ROUNDS) --out docs/PERFORMANCE.md
	$(PY_PYTHON) python/bench/bench_engine.py --bin $(BIN) --rounds $(BENCH_ROUNDS) --out docs/PERFORMANCE.md

# The executables tests launch (plugins, the CLI, the examples, the plugin
# host's test programs), built with -race once into RACE_BIN for every test
# process (internal/testbin links to them instead of linking its own).
RACE_BIN := $(BIN)/race
HOST_TESTDATA := $(filter-out ./plugins/host/testdata/needlib,$(patsubst %/main.go,./%,$(wildcard plugins/host/testdata/*/main.go)))
.PHONY: race-bin
race-bin:
	@mkdir -p $(RACE_BIN)
	$(GO) build -race -o $(RACE_BIN)/ ./cmd/... ./examples/... $(HOST_TESTDATA)

# The host-side packages (their TestMain calls testbin.HostSide): make test
# runs the plugins and CLI their tests launch as plain builds (bin/), make
# test-long again as race-built ones.
HOST_SIDE_PACKAGES = $(sort $(patsubst %/,%,$(dir $(shell grep -rl --include='*_test.go' 'testbin\.HostSide$(LP)' . | grep -v '^./\.tools/'))))

## test: vet, build the plugin binaries, run every test with the race detector, and
## beside them the out-of-tree example plugin's tests (its own module) and the Python
## package's tests; minutes, on 2 cores. The long runs skip, naming make test-long.
# TEST_P packages are tested at once (go test -p; its default is the number of
# CPUs): many tests spend most of their time waiting (a lease to expire, a
# killed server to be noticed), which others' CPU work can fill.
TEST_P ?= 4
# The packages that take longest start first (go test runs packages in the
# order given), so they do not form the tail of the run.
TEST_FIRST := ./connector ./transports/efa ./transports/tcp ./transports/ucx ./cmd/kvconnect ./metadata ./plugins/host
test: build race-bin
	$(GO) vet ./...
	cd $(EXAMPLE_PLUGIN) && $(GO) vet ./...
	@py=$$(mktemp -t kvconnect-test-python.XXXXXX); \
	$(MAKE) --no-print-directory test-python > $$py 2>&1 & python=$$!; \
	(cd $(EXAMPLE_PLUGIN) && $(GO) test -race -count=1 -timeout 10m ./...) & example=$$!; \
	KVCONNECT_TESTBIN_RACE_DIR=$(RACE_BIN) KVCONNECT_TESTBIN_PLAIN_DIR=$(BIN) KVCONNECT_TEST_LIBKVCONNECT=$(BIN)/libkvconnect.so \
		$(GO) test -race -count=1 -p $(TEST_P) -timeout 20m $(TEST_FIRST) ./...; main=$$?; \
	wait $$example; example=$$?; \
	wait $$python; python=$$?; cat $$py; rm -f $$py; \
	[ $$main = 0 ] && [ $$example = 0 ] && [ $$python = 0 ] || { echo "make test: failed (main module exit $$main, example plugin exit $$example, Python exit $$python)"; exit 1; }

## test-python: the Python package's tests (python/tests, unittest from the standard library) on bin/
test-python:
	KVCONNECT_BIN=$(BIN) KVCONNECT_LIBRARY=$(BIN)/libkvconnect.so timeout 900 \
		$(PY_PYTHON) -m unittest discover -s python/tests -t python/tests

# The long tests are the ones that call testbin.Long (they skip in make test):
# found here, so a new one needs no entry in this file.
LP := (
LONG_FILES = $(shell grep -rl --include='*_test.go' 'testbin\.Long$(LP)' . | grep -v '^./\.tools/')
LONG_PACKAGES = $(sort $(patsubst %/,%,$(dir $(LONG_FILES))))
LONG_TESTS = $(shell awk '/^func Test/ { n = $$2; sub(/[$(LP)].*/, "", n) } /testbin\.Long[$(LP)]/ { print n }' $(LONG_FILES) | sort -u | paste -sd'|')
# A count, not a duration: go1.26's fuzzing coordinator can fail a target
# with a bare "context deadline exceeded" when a duration ends while a
# starved worker is mid-run (golang/go#75804, fixed in Go 1.27); a count
# has no deadline to race.
LONG_FUZZTIME ?= 10000x

## test-long: what make test leaves out: the long tests with the race detector (100,000 regions,
## the multi-host suite beyond its smoke test, the 25-second soak, the conformance suite's
## other plugin runs, Mooncake's bench in every mode), the host-side packages' tests again
## with race-built plugins and CLI, then every fuzz target for
## LONG_FUZZTIME (default 10000x: executions) beyond its seed corpus
test-long: build race-bin
	set -o pipefail; KVCONNECT_TEST_LONG=1 KVCONNECT_TESTBIN_RACE_DIR=$(RACE_BIN) $(GO) test -race -count=1 -timeout 40m -v -run '^($(LONG_TESTS))$$' $(LONG_PACKAGES) | grep -v '^=== RUN'
	KVCONNECT_TESTBIN_RACE_DIR=$(RACE_BIN) KVCONNECT_TEST_LIBKVCONNECT=$(BIN)/libkvconnect.so $(GO) test -race -count=1 -timeout 20m $(HOST_SIDE_PACKAGES)
	$(MAKE) fuzz FUZZTIME=$(LONG_FUZZTIME)

## soak: nodes moving verified blocks without pause for SOAK_DURATION (default 30m) while
## faults are injected at random (plugin kills, peer restarts and hangs, link cuts, hostile
## connections); prints the report (and writes it to SOAK_REPORT); fails on any corrupted
## block, leak or unrecovered target
SOAK_DURATION ?= 30m
SOAK_TIMEOUT ?= 3h
SOAK_REPORT ?= soak-report.md
.PHONY: soak
soak: build
	set -o pipefail; $(GO) test -race -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./test/soak \
		-args -soak.duration=$(SOAK_DURATION) -soak.report=$(CURDIR)/$(SOAK_REPORT) | grep -v '^=== RUN'

## test-short: the tests without the race detector
test-short: build
	$(GO) test -count=1 ./...

## lint: formatting, vet, staticcheck, and generated code up to date
lint: check-generate
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd $(EXAMPLE_PLUGIN) && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## fuzz: run every native fuzz target in the tree for FUZZTIME each (default 30s), in its
## package's directory (so the out-of-tree example plugin's, in its own module, too)
FUZZTIME ?= 30s
fuzz:
	@set -e; for f in $$(git ls-files '*_test.go'); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$t ($$(dirname $$f))"; \
			(cd $$(dirname $$f) && $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) .); \
		done; \
	done

clean:
	rm -rf $(BIN) $(TOOLS) python/build dist
