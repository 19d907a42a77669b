# cronmesh — build, test and run the mesh. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

BIN        := $(CURDIR)/bin
TOOLS_STAMP := $(BIN)/.tools-$(shell sha256sum tools/go.sum | cut -c1-12)
# golangci-lint, pinned in its own module (tools/lint) so that its many
# dependencies do not move the versions of buf and the protoc plugins.
LINT_STAMP  := $(BIN)/.lint-$(shell sha256sum tools/lint/go.sum | cut -c1-12)
GOLANGCI_LINT := $(BIN)/golangci-lint
NODE_STAMP  := gen/ts/node_modules/.stamp
# croner and cron-parser, which libs/schedule's cross-check test runs.
CROSSCHECK_DIR   := libs/schedule/testdata/crosscheck
CROSSCHECK_STAMP := $(CROSSCHECK_DIR)/node_modules/.stamp
# The web console's single-page application, built by vite into the
# directory the console binary embeds.
CONSOLE_WEB   := services/console/web
CONSOLE_STAMP := $(CONSOLE_WEB)/node_modules/.stamp
CONSOLE_DIST  := services/console/internal/assets/dist/index.html
CONSOLE_SRC    = $(shell find $(CONSOLE_WEB)/src $(CONSOLE_WEB)/public gen/ts/src -type f) $(CONSOLE_WEB)/index.html $(CONSOLE_WEB)/vite.config.ts $(CONSOLE_WEB)/tsconfig.json
# The browser of the console's end-to-end test (playwright-core drives it).
CHROMIUM   ?= /usr/bin/chromium
BUF        := $(BIN)/buf
HELM       := $(BIN)/helm
GO_MODULES  = $(shell go list -m -f '{{.Dir}}')
SERVICES   := registry trigger dispatcher history alerting console
CHAOS_JOBS ?= 10000
# The whole-mesh fault-injection suite of `make chaos` (services/devstack/chaos):
# every-second jobs, load after each recovery, how long a stopped dependency
# stays down and how long the target hangs. `make test` runs it with its
# short defaults (200 jobs, 10 s, 5 s, 10 s).
CHAOS_MESH_JOBS ?= 1000
CHAOS_AFTER     ?= 30s
CHAOS_OUTAGE    ?= 20s
CHAOS_HANG      ?= 60s
# How much `make test` fuzzes the schedule parser: a count of inputs (about
# 10 s on a 2-core host), not a duration. With a duration, Go's fuzzing
# coordinator can fail the run with a bare "context deadline exceeded" when
# the time runs out while a worker is busy on a loaded machine (a race in
# the coordinator, reported upstream), as it did here once; a count has no
# deadline to race.
FUZZTIME   ?= 250000x

# Build paths out of the binaries and the build cache's keys: a fresh
# clone then reuses what any earlier checkout compiled (about 50 s of the
# race-detector build alone); the images' builds set it too
# (deploy/docker). Tests that need a file of the
# repository find it from their package's directory, where go test runs
# them, not from their own source path.
export GOFLAGS := -trimpath $(GOFLAGS)

export CRONMESH_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable
export CRONMESH_TEST_AMQP_URL     ?= amqp://guest:guest@127.0.0.1:5672/

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

# install_tools copies the tools $(2) (package paths) of the module in
# directory $(1) into $(BIN). `go tool -n` builds a tool once and keeps the
# executable in Go's build cache, so a fresh clone copies the tools
# instead of linking them all again, as `go install` would (about a minute
# here). module_tools is every tool of the module in directory $(1): its
# go.mod's tool directives, the paths among `go tool`'s list (the Go
# distribution's own tools there have no slash).
install_tools = mkdir -p $(BIN) && for pkg in $(2); do cp -f "$$(cd $(1) && GOWORK=off go tool -n $$pkg)" $(BIN)/$$(basename $$pkg); done
module_tools = $$(cd $(1) && GOWORK=off go tool | grep /)

$(TOOLS_STAMP): tools/go.mod tools/go.sum
	@echo "installing pinned tools into $(BIN)"
	$(call install_tools,tools,$(call module_tools,tools))
	rm -f $(BIN)/.tools-* && touch $@

# buf and grpcurl alone, at the versions tools/go.mod pins: what `make dev`
# installs, since its banner and the README's tour call bin/buf curl and
# bin/grpcurl against the mesh. The rest of `tools` (helm, the protoc
# plugins, the npm packages) serves generate, lint and the tests only.
TOOL_PKG_buf     := github.com/bufbuild/buf/cmd/buf
TOOL_PKG_grpcurl := github.com/fullstorydev/grpcurl/cmd/grpcurl
$(BIN)/buf $(BIN)/grpcurl: tools/go.mod tools/go.sum
	$(call install_tools,tools,$(TOOL_PKG_$(notdir $@)))
	touch $@

$(LINT_STAMP): tools/lint/go.mod tools/lint/go.sum
	@echo "installing pinned golangci-lint into $(BIN)"
	$(call install_tools,tools/lint,$(call module_tools,tools/lint))
	rm -f $(BIN)/.lint-* && touch $@

# npm ci installs every package at the version and integrity its lock
# file pins; --prefer-offline takes them from npm's cache without asking
# the registry whether the cached metadata is current, and fetches only
# what the cache lacks (the console's install in a fresh clone: 16.0 and
# 16.3 s against 19.3 and 21.3 s, alternating, 2026-11-27).
NPM_CI_FLAGS := --no-audit --no-fund --loglevel=error --prefer-offline

$(NODE_STAMP): gen/ts/package.json gen/ts/package-lock.json
	cd gen/ts && npm ci $(NPM_CI_FLAGS)
	touch $@

$(CROSSCHECK_STAMP): $(CROSSCHECK_DIR)/package.json $(CROSSCHECK_DIR)/package-lock.json
	cd $(CROSSCHECK_DIR) && npm ci $(NPM_CI_FLAGS)
	touch $@

$(CONSOLE_STAMP): $(CONSOLE_WEB)/package.json $(CONSOLE_WEB)/package-lock.json
	cd $(CONSOLE_WEB) && npm ci $(NPM_CI_FLAGS)
	touch $@

$(CONSOLE_DIST): $(CONSOLE_STAMP) $(CONSOLE_SRC)
	cd $(CONSOLE_WEB) && npm run --silent build

# Debian's Chromium for the console's browser test: Playwright's own
# browser download does not work on every machine. As root it is installed
# with apt, as ensure-services.sh installs PostgreSQL; otherwise make says how.
$(CHROMIUM):
	@if [ "$$(id -u)" != 0 ]; then echo "$(CHROMIUM) is missing: install it (Debian: apt-get install -y chromium) and run again"; exit 1; fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null

.PHONY: tools
tools: $(TOOLS_STAMP) $(NODE_STAMP) $(CROSSCHECK_STAMP) $(CONSOLE_STAMP) ## Install the pinned tools (buf, protoc plugins, grpcurl, helm, protoc-gen-es, tsc, the cron libraries of the schedule cross-check).

.PHONY: services
services: ## Start PostgreSQL and RabbitMQ when they are not running; create the cronmesh database; give PostgreSQL the settings the mesh needs (max_connections, autovacuum, max_wal_size).
	deploy/local/ensure-services.sh

.PHONY: generate
generate: tools ## Generate Go and TypeScript code from proto/ into gen/.
	$(BUF) generate

.PHONY: checkgenerate
checkgenerate: generate ## Fail when gen/ differs from what proto/ generates.
	@if ! git diff --quiet -- gen || [ -n "$$(git ls-files --others --exclude-standard -- gen)" ]; then \
	  git diff --stat -- gen; git ls-files --others --exclude-standard -- gen; \
	  echo "gen/ is out of date: run 'make generate' and commit it"; exit 1; fi

.PHONY: lint
lint: tools $(LINT_STAMP) ## buf lint and format check, go vet and golangci-lint (.golangci.yml) on every module, TypeScript type-check.
	$(BUF) lint
	$(BUF) format --diff --exit-code
	for dir in $(GO_MODULES); do (cd $$dir && go vet ./... && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...); done
	cd gen/ts && npx --no-install tsc -p tsconfig.json --noEmit
	cd $(CONSOLE_WEB) && npx --no-install tsc -p tsconfig.json --noEmit && npx --no-install tsc -p tsconfig.node.json --noEmit

.PHONY: build
build: $(CONSOLE_DIST) ## Build the service binaries (the console with its web assets), the cronctl CLI and the local-stack tools (devetcd, devecho) into bin/.
	for svc in $(SERVICES); do go build -o $(BIN)/$$svc ./services/$$svc/cmd/$$svc; done
	go build -o $(BIN)/cronctl ./services/cronctl/cmd/cronctl
	go build -o $(BIN)/devetcd ./services/devstack/cmd/devetcd
	go build -o $(BIN)/devecho ./services/devstack/cmd/devecho

# The packages of every module but the end-to-end suites: the unit and
# integration tests (against the real PostgreSQL, RabbitMQ and an embedded
# etcd) that test-short runs. -vet=off because `lint` has just run go vet
# (a superset of the checks go test runs) over every package. Three test
# binaries at a time, one more than the cores: they wait on PostgreSQL,
# RabbitMQ and etcd more than they compute (2 min 14 s against 3 min 5 s
# for two at a time, 2026-11-27; four were no faster).
UNIT_PARALLEL ?= 3
# The race detector sleeps a second before a binary exits (to report races
# of goroutines still running); with 87 test binaries, three at a time,
# that was about half a minute of waiting (test-short 3 min 34 s against
# 3 min 52 s and 4 min 11 s, 2026-11-27).
GORACE ?= atexit_sleep_ms=0
export GORACE
# Test binaries link without DWARF: stack traces, race reports and
# profiles read the symbol table, which stays, and the hundred or so links
# of make test take less (go test -race of every package with no test run:
# 68-72 s against 77-90 s, 2026-11-27).
TEST_LDFLAGS := -ldflags=-w
# unit_tests runs them with the go test flags of its argument. make test
# runs every one (-count=1). test-short, the edit loop, lets go test reuse
# the result of a package whose code, test data and environment have not
# changed since it last passed, as go test does by default: after an edit
# only the packages it reaches run again (TEST_SHORT_FLAGS=-count=1 runs
# them all).
unit_tests = for dir in $(GO_MODULES); do (cd $$dir && go test -race $(TEST_LDFLAGS) $(1) -vet=off -p $(UNIT_PARALLEL) $$(go list ./... | grep -Ev '/e2e$$|/chaos$$')); done
TEST_SHORT_FLAGS ?=
# The end-to-end suites (real processes on the wall clock) and how many of
# them run at once, the two longest first so that neither ends up running
# alone; within a suite, the tests that start meshes of their own are
# parallel tests, two at a time (go test's -parallel: the cores). The
# whole-mesh fault-injection suite (chaos) is among them, its scenarios
# that restart PostgreSQL and RabbitMQ included: they restart servers of
# their own (pgtest.NewServer, amqptest.NewServer), not the shared ones.
E2E_FIRST      := github.com/cronmesh/cronmesh/services/devstack/e2e github.com/cronmesh/cronmesh/services/devstack/chaos
E2E_SUITES      = $(E2E_FIRST) $(filter-out $(E2E_FIRST),$(shell go list ./... | grep -E '/e2e$$'))
E2E_PARALLEL   ?= 3

.PHONY: test-short
test-short: tools services lint ## The edit loop: lint, then the unit and integration tests with -race, those of unchanged packages from go test's cache; no end-to-end suite.
	@# ./deploy lints and renders the Helm chart with $(HELM) and checks the
	@# manifests and the Dockerfiles; it runs with the root module below.
	$(call unit_tests,$(TEST_SHORT_FLAGS))

.PHONY: test
test: tools services lint build checkgenerate $(CHROMIUM) ## Run every check and test (needs nothing installed by hand).
	$(call unit_tests,-count=1)
	go test -run='^$$' -fuzz=FuzzParseCron -fuzztime=$(FUZZTIME) ./libs/schedule
	@# The end-to-end suites run real processes against the timing promises
	@# (a slot within 5 s of its time), so they run after the race-detector
	@# suites rather than beside them, $(E2E_PARALLEL) at a time, with the
	@# binaries of `build` (bin/), which the tour test
	@# (services/devstack/e2e) also runs deploy/local/dev.sh with; the short
	@# version of the fault-injection suite among them.
	CRONMESH_TEST_BIN_DIR=$(BIN) go test $(TEST_LDFLAGS) -count=1 -vet=off -p $(E2E_PARALLEL) -timeout 30m $(E2E_SUITES)

.PHONY: chart
chart: tools ## Lint the Helm chart and print its manifests with the default values.
	$(HELM) lint --strict deploy/helm/cronmesh
	$(HELM) template cronmesh deploy/helm/cronmesh

.PHONY: bench
bench: tools services build ## Run the benchmarks (see docs/benchmarks.md).
	deploy/local/bench.sh
	deploy/local/bench-trigger.sh
	deploy/local/bench-dispatcher.sh
	deploy/local/bench-alerting.sh

.PHONY: dev
dev: services build $(BIN)/buf $(BIN)/grpcurl ## Run the whole mesh locally with an echo target and a demo job (prints endpoints and a development API key); installs only buf and grpcurl, which its banner and the tour call.
	deploy/local/dev.sh

.PHONY: chaos
chaos: tools services build ## Fault-injection suites: trigger failover at 10x the jobs of `make test`, then every whole-mesh fault with a summary table.
	@# Trigger tier: SIGKILL, SIGSTOP past the lease and a joining node under
	@# $(CHAOS_JOBS) every-second jobs, and a 30 s broker outage; every slot
	@# checked at the queue for fired-once and the 5 s promise (about 2
	@# minutes). Whole mesh (services/devstack/chaos): ten faults (a rolling
	@# restart of every service among them), each on its
	@# own mesh with $(CHAOS_MESH_JOBS) every-second jobs and a ledger of every
	@# slot. Both suites run whatever the first one says; the table is printed
	@# even when a scenario fails, and make fails if either suite failed.
	rm -f .chaos-summary.md
	status=0; export CRONMESH_TEST_BIN_DIR=$(BIN); CRONMESH_E2E_JOBS=$(CHAOS_JOBS) go test -count=1 -p 1 -timeout 30m -v -run 'TestFailover|TestBrokerOutage' ./services/trigger/e2e || status=$$?; \
	  CRONMESH_CHAOS_JOBS=$(CHAOS_MESH_JOBS) CRONMESH_CHAOS_AFTER=$(CHAOS_AFTER) CRONMESH_CHAOS_OUTAGE=$(CHAOS_OUTAGE) \
	  CRONMESH_CHAOS_HANG=$(CHAOS_HANG) CRONMESH_CHAOS_SUMMARY=$(CURDIR)/.chaos-summary.md \
	  go test -count=1 -p 1 -parallel 1 -timeout 60m -v ./services/devstack/chaos || status=$$?; \
	  echo; echo "| scenario | jobs | slots | recovery | max lateness | retries | republished | duplicate deliveries | verdict |"; \
	  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"; cat .chaos-summary.md 2>/dev/null; exit $$status

.PHONY: clean
clean: ## Remove built binaries and installed tools.
	rm -rf $(BIN) gen/ts/node_modules gen/ts/dist gen/ts/dist-test $(CROSSCHECK_DIR)/node_modules $(CONSOLE_WEB)/node_modules .dev .chaos-summary.md
	find services/console/internal/assets/dist -mindepth 1 ! -name .gitignore -delete

# The history benchmark is a prerequisite of `bench`, declared here rather
# than in bench's recipe so that each service's benchmark is its own target.
.PHONY: bench-history
bench-history: tools services build ## History benchmark: 10M executions, ListExecutions and search latency, ingest events/s.
	deploy/local/bench-history.sh

bench: bench-history

# The end-to-end benchmark of the whole mesh, also a prerequisite of `bench`.
.PHONY: bench-mesh
bench-mesh: tools services build ## End-to-end benchmark of the mesh as make dev runs it: capacity (a ramp), the mix at 3,000/s for 10 min, a 100,000-slot burst, 5M jobs in the trigger tier.
	deploy/local/bench-mesh.sh

bench: bench-mesh
