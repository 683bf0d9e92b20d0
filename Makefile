# Ferry's build. Everything a fresh machine needs is fetched by these
# targets: Go modules from the module proxy, Apache Kafka from Maven Central,
# Consul built from its open-source Go module.

GO        ?= go
BIN       := bin
CODEGEN   := $(GO) tool -modfile=tools/codegen/go.mod
DEMO_ARGS ?=

.PHONY: all build generate checkgenerate breaking lint test test-short stress demo bench bench-leases scenarios soak fuzz kafka consul jaeger buildah chromium promtool drill-outside dashboard image clean

all: build

# The shipped binaries are built as released (tools/release/build.sh:
# static, -trimpath, version and commit stamped); the tools as usual.
build:
	GO=$(GO) tools/release/build.sh $(BIN)
	$(GO) build -o $(BIN)/ferry-demo ./loadtest/cmd/ferry-demo
	$(GO) build -o $(BIN)/ferry-certs ./loadtest/cmd/ferry-certs
	$(GO) build -o $(BIN)/ferry-produce ./loadtest/cmd/ferry-produce
	$(GO) build -o $(BIN)/ferry-verify ./loadtest/cmd/ferry-verify

generate:
	$(CODEGEN) buf lint
	$(CODEGEN) buf generate

# COMPAT_AGAINST is the wire contract of the last release, a buf image
# checked in under proto/compat (docs/deploy.md, "Upgrades").
COMPAT_AGAINST := proto/compat/v0.1.0.binpb

# breaking fails on any change to proto/ferry/v1 that a fetcher or writer of
# the last release could not talk across: the wire contract only grows, so
# the two tiers can be upgraded one at a time, in either order.
breaking:
	$(CODEGEN) buf breaking --against $(COMPAT_AGAINST)

# checkgenerate fails when the checked-in generated code is stale or the
# contract broke compatibility with the last release.
checkgenerate: generate breaking
	@git diff --exit-code -- pkg/gen || (echo "pkg/gen is stale: run 'make generate' and commit" && exit 1)

# dashboard regenerates the Grafana dashboard JSON from its Go source
# (deploy/observability/dashboard.go); a test fails when they differ.
dashboard:
	cd deploy/observability && $(GO) run ./gen ferry-dashboard.json

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Real Apache Kafka (and MirrorMaker 2) jars, for the end-to-end tests and
# the benchmark.
kafka:
	bash loadtest/kafka/fetch.sh

# A real Consul agent (1.15.4, MPL-2.0) built from its Go module.
consul:
	bash tools/consul-dev/build.sh

# Jaeger v2 (v1.75.0, the newest approved release) built from its Go module, for the tracing tests.
jaeger:
	bash tools/jaeger/build.sh

# buildah builds images without a daemon (Debian's package; needs root to
# install, as on CI). image builds localhost/ferry-fetcher:<version> and
# localhost/ferry-writer:<version> into buildah's store
# (deploy/image/build.sh; docs/deploy.md says how to push them).
buildah:
	@command -v buildah >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah; }

# chromium is the browser the status page's test drives (Debian's package;
# services/writer/internal/app TestStatusPageInChromium fails without it).
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# promtool checks and unit-tests the Prometheus rules in
# deploy/observability: Debian's prometheus package (pinned in the script)
# unpacked into the Ferry cache with dpkg -x, nothing installed; tests find
# it through loadtest/toolbin, or $$FERRY_PROMTOOL.
promtool:
	bash tools/promtool/build.sh

# drill-outside checks the disaster-recovery runbook as a user would, with
# clients outside Go (docs/disaster-recovery.md, "Checked with clients
# outside Go"): a Python application (confluent-kafka, pinned, in a venv in
# the Ferry cache) and kcat (Debian's package), both from
# tools/outside/build.sh, on two Apache Kafka brokers. It writes its report
# to OUTSIDE_REPORT. Never part of make test.
OUTSIDE_REPORT ?= $(CURDIR)/loadtest/results/$(shell date -u +%F)-outside/report.md
drill-outside: kafka
	bash tools/outside/build.sh >/dev/null
	FERRY_OUTSIDE_REPORT=$(OUTSIDE_REPORT) $(GO) test -tags outside -count=1 -timeout 20m -v \
		-run '^TestOutsideGoRoundTrip$$' ./loadtest/e2e/

IMAGE_PREFIX ?= localhost/ferry
IMAGE_TAG    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image: buildah
	GO=$(GO) deploy/image/build.sh $(IMAGE_PREFIX) $(IMAGE_TAG)

# test runs every test, the slow ones included; nothing skips for a missing
# component: the targets above provide them.
# Files tests keep (t.ArtifactDir: the status page's screenshot) land in
# test-artifacts/_artifacts/.
test: lint checkgenerate kafka consul jaeger buildah chromium promtool
	mkdir -p test-artifacts
	$(GO) test -race -count=1 -timeout 45m -artifacts -outputdir $(CURDIR)/test-artifacts ./...

# stress runs every unit and in-process package (all but loadtest/e2e and
# loadtest/soak) under -race, STRESS_COUNT times (3), with STRESS_BURNERS
# (2) CPU-bound processes beside them, as a full make test loads a 2-core
# machine: a test wait that only holds on an idle machine fails here
# (docs/testing.md, "Waits under load"). Its log: test-artifacts/stress.log.
stress: kafka consul jaeger buildah chromium promtool
	GO=$(GO) bash tools/stress/run.sh

test-short: kafka consul jaeger chromium
	$(GO) test -short -count=1 ./...

demo: build
	$(BIN)/ferry-demo --bin $(BIN) $(DEMO_ARGS)

# bench runs Ferry and MirrorMaker 2 side by side on real Apache Kafka and
# writes loadtest/results/<date>/. Never part of make test.
BENCH_ARGS ?=
bench: build kafka jaeger
	$(GO) run ./loadtest/cmd/ferry-bench --bin $(BIN) $(BENCH_ARGS)

# bench-leases is the lease scale check: 2,000 shards, 4 fetchers, one
# real Consul agent.
bench-leases: consul
	$(GO) test -run '^$$' -bench LeaseScale -benchtime 1x ./services/fetcher/internal/ownership/

# scenarios runs every fault scenario (real processes, real Kafka, real
# Consul; writer killed 20 times in the exactly-once run) and writes the
# table in docs/reliability.md. One at a time: make scenarios SCENARIOS=TestDroppedConnections
SCENARIOS ?= .
scenarios: build kafka consul jaeger
	FERRY_SCENARIO_KILLS=20 FERRY_SCENARIO_REPORT=$(CURDIR)/docs/reliability.md \
		$(GO) test -count=1 -timeout 60m -v -run '$(SCENARIOS)' ./loadtest/e2e/

# soak runs Ferry under a seeded random schedule of faults on real Kafka,
# Consul and toxiproxy, then compares target and source record by record
# (docs/reliability.md). make test runs a two-minute one (TestSoak).
# SOAK_SEED=0 picks a seed; SOAK_OUT appends each report as a JSON line.
# SOAK_SYSTEM=mm2-eos runs the same schedule against MirrorMaker 2
# exactly-once instead of Ferry; SOAK_SYSTEM=ferry-aa adds Ferry's link back
# (active-active: writes on both sides, no record may come back);
# SOAK_SYSTEM=ferry-dr then loses the source region (broker, fetchers and
# Consul killed), fails over with ferryctl, moves an application's group to
# the target and accounts for every record (docs/reliability.md);
# SOAK_REGION_LOSS=partition cuts the region off instead of killing it
# (everything runs on, the writers' streams still open at the failover).
# A run whose longest recovery after a fault exceeds 60 s fails.
SOAK_SYSTEM   ?= ferry
SOAK_MINUTES  ?= 5
SOAK_SEED     ?= 0
SOAK_DELIVERY ?= exactly_once
SOAK_CODEC    ?=
SOAK_REGION_LOSS ?=
SOAK_OUT      ?= loadtest/results/soak/runs.jsonl
soak: build kafka consul
	@mkdir -p $(dir $(SOAK_OUT))
	$(GO) run ./loadtest/cmd/ferry-soak --system $(SOAK_SYSTEM) --bin $(BIN) --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) \
		--delivery $(SOAK_DELIVERY) --codec '$(SOAK_CODEC)' --region-loss '$(SOAK_REGION_LOSS)' --out $(SOAK_OUT) \
		--commit "$$(git describe --always --dirty 2>/dev/null)"

# fuzz runs each fuzz target for a bounded time (FUZZTIME, default 30s),
# one at a time (go test fuzzes one target per run). The targets and what
# they check: docs/security.md, "Fuzzed parsers". `make test` runs their
# seeds and checked-in corpora (testdata/fuzz) as tests.
FUZZTIME ?= 30s
FUZZ_TARGETS = \
	./pkg/batch:FuzzOpen \
	./pkg/batch:FuzzOpenKafka \
	./pkg/config:FuzzLoad \
	./pkg/recordbatch:FuzzParse \
	./pkg/recordbatch:FuzzRoundTrip \
	./pkg/recordbatch:FuzzLZ4Frame \
	./pkg/recordbatch:FuzzFromLegacy \
	./pkg/provenance:FuzzDecodeEntry \
	./pkg/refusal:FuzzFrom \
	./services/writer/internal/checkpoint:FuzzCheckpointRecord \
	./services/writer/internal/offsetindex:FuzzIndexRecord \
	./services/writer/internal/heartbeat:FuzzDecode \
	./services/writer/internal/server:FuzzCheckOpen \
	./services/fetcher/internal/rawfetch:FuzzReadPartition
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*}"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done

clean:
	rm -rf $(BIN)
