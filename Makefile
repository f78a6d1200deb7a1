# fleetcast — run `make` or `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
EMULATORS := scripts/emulators.sh
CONTROLPLANE := scripts/controlplane.sh
TERRAFORM := scripts/terraform.sh
PROTO     := scripts/proto.sh
CHROMIUM  := scripts/chromium.sh
HELM      := scripts/helm.sh
# Examples that are modules of their own (go test ./... does not enter
# them): make vet and make test run them too.
EXAMPLE_MODULES := examples/allocation
# Where `make emulators-up` keeps the emulators' PIDs, ports and logs.
EMU_DIR   := .emulators
# make bench: time per core benchmark, rounds of them, and flags for the
# scenario benchmarks (go test ./emulator-tests -args -help lists them).
BENCHTIME ?= 2s
BENCHCOUNT ?= 5
BENCHFLAGS ?=
# The garbage collector's settings of a deployed query instance (the
# Terraform module's GOGC and GOMEMLIMIT), which BenchmarkReaders, the
# instance, runs with; the Terraform cross-check test holds them equal.
QUERY_GC := GOGC=off GOMEMLIMIT=460MiB
# How long make demo runs; 0 = until Ctrl-C.
DURATION ?= 0

# The set-up every run of the pipeline shares, written once. Each is the
# start of a recipe line, which ends with the command to run:
# WITH_CONTROLPLANE exports the control plane's binaries (built once per
# machine) and the flag that makes tests fail, not skip, without them;
# WITH_BROWSER the same for Chromium (installed when missing); ON_EMULATORS
# runs the command with both emulators, started on free ports and stopped
# after it, whatever its end.
WITH_CONTROLPLANE = eval "$$($(CONTROLPLANE) build)"; export KUBE_APISERVER ETCD REQUIRE_CONTROLPLANE=1;
WITH_BROWSER      = export CHROMIUM="$$($(CHROMIUM) path)" REQUIRE_BROWSER=1;
ON_EMULATORS      = $(EMULATORS) run --
DEMO              = mkdir -p bin && $(GO) build -o bin/fleetcast-demo ./cmd/fleetcast-demo && $(ON_EMULATORS) bin/fleetcast-demo

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: fmt
fmt: ## Format the Go code (gofmt -w).
	gofmt -w .

.PHONY: vet
vet: ## Check formatting, that git tracks no compiled binary, the .proto files (buf lint, generated code current, buf breaking), and run go vet.
	@unformatted=$$(gofmt -l .); \
	if [[ -n $$unformatted ]]; then echo "gofmt needed: $$unformatted" >&2; exit 1; fi
	@binaries=$$(git ls-files -z 2>/dev/null | xargs -0 -r grep -l -m1 -P '\A\x7fELF' -- 2>/dev/null || true); \
	if [[ -n $$binaries ]]; then echo "compiled binaries are tracked by git: $$binaries" >&2; exit 1; fi
	$(PROTO) check
	$(GO) vet ./...
	for m in $(EXAMPLE_MODULES); do (cd $$m && $(GO) mod tidy -diff && $(GO) vet ./...) || exit 1; done

.PHONY: proto
proto: ## Regenerate gen/ from schemas/fleetcast/v1/*.proto and third_party/agones (Agones' allocation API); builds buf and the plugins if missing.
	$(PROTO) generate

.PHONY: demo
demo: ## Run the whole pipeline locally: emulators, control plane, 3 publishers, simulator, live view (DURATION=60s stops by itself).
	$(WITH_CONTROLPLANE) $(DEMO) --duration=$(DURATION)

.PHONY: screenshots
screenshots: ## Write docs/dashboard.png and docs/dashboard-versions.png from the demo's data (a 60 s demo; installs Chromium if missing).
	$(WITH_CONTROLPLANE) $(WITH_BROWSER) $(DEMO) --duration=60s --screenshots=docs

.PHONY: test
test: vet terraform ## Run every test with -race: builds the control plane and Helm and installs Chromium if missing, starts and stops the emulators.
	$(WITH_CONTROLPLANE) $(WITH_BROWSER) \
	export FLEETCAST_TF_PROVIDER_DIR="$$($(TERRAFORM) build)" REQUIRE_TERRAFORM=1 HELM="$$($(HELM) path)" REQUIRE_HELM=1; \
	$(ON_EMULATORS) bash -c '$(GO) test -race -count=1 -timeout 30m ./... && for m in $(EXAMPLE_MODULES); do (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done'

.PHONY: terraform
terraform: ## Offline Terraform checks: fmt, validate and test (module, dev, prod), plan dev and prod; builds the providers if missing.
	$(TERRAFORM) check

.PHONY: source
source: ## Build the functions' deployable source zip (bin/functions.zip).
	mkdir -p bin
	$(GO) run ./internal/cmd/source -o bin/functions.zip

.PHONY: chart-docs
chart-docs: ## Write the charts' READMEs' values tables from their values.yaml's comments.
	$(GO) run ./internal/cmd/chartdoc publisher/chart
	$(GO) run ./internal/cmd/chartdoc cmd/fleetcast-allocator/chart

.PHONY: chart
chart: ## Lint the Helm charts and package them (bin/fleetcast-publisher-VERSION.tgz, bin/fleetcast-allocator-VERSION.tgz); builds Helm if missing.
	mkdir -p bin
	h="$$($(HELM) path)"; \
	"$$h" lint --strict publisher/chart --values publisher/testdata/chart-values-gke.yaml && \
	"$$h" package publisher/chart --destination bin && \
	"$$h" lint --strict cmd/fleetcast-allocator/chart --values cmd/fleetcast-allocator/testdata/chart-values.yaml && \
	"$$h" package cmd/fleetcast-allocator/chart --destination bin

# make image: the publisher's image, for both architectures, tagged and
# versioned with the chart's appVersion; IMAGE names its repository.
IMAGE ?= REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-publisher
# VERSION may be given with or without the "v" (make release VERSION=v0.4.0);
# images and the chart take it without, binaries report it with.
VERSION ?= $(shell awk '$$1 == "appVersion:" {gsub(/"/, "", $$2); print $$2}' publisher/chart/Chart.yaml)
override VERSION := $(patsubst v%,%,$(VERSION))
RELEASE  = v$(VERSION)

.PHONY: image
image: ## Build and push the publisher's image for linux/amd64 and linux/arm64 (IMAGE=repository; needs docker buildx).
	@command -v docker >/dev/null || { echo "make image needs docker with buildx" >&2; exit 1; }
	docker buildx build --platform linux/amd64,linux/arm64 -f cmd/fleetcast-publisher/Dockerfile \
	  --build-arg VERSION=$(RELEASE) --build-arg COMMIT="$$(git rev-parse HEAD)" -t $(IMAGE):$(VERSION) --push .

# make cloudbuild: the images built and pushed by Cloud Build into REGISTRY
# (Terraform's output registry), as BUILD_SERVICE_ACCOUNT (its output
# image_build_service_account; default NAME_PREFIX-build of the project).
REGISTRY ?=
NAME_PREFIX ?= fleetcast
CLOUDBUILD_PROJECT = $(word 2,$(subst /, ,$(REGISTRY)))
BUILD_SERVICE_ACCOUNT ?= $(NAME_PREFIX)-build@$(CLOUDBUILD_PROJECT).iam.gserviceaccount.com

.PHONY: cloudbuild
cloudbuild: ## Build and push every program's image (publisher, query, ingest, allocator) with Cloud Build, no Docker needed (REGISTRY=REGION-docker.pkg.dev/PROJECT/fleetcast; needs gcloud).
	@[[ "$(REGISTRY)" =~ ^[a-z0-9-]+-docker\.pkg\.dev/[a-z][a-z0-9-]+/[a-z0-9._-]+$$ ]] || { echo "make cloudbuild: set REGISTRY to Terraform's output registry, REGION-docker.pkg.dev/PROJECT/REPOSITORY (got \"$(REGISTRY)\")" >&2; exit 2; }
	@command -v gcloud >/dev/null || { echo "make cloudbuild needs the gcloud CLI" >&2; exit 1; }
	gcloud builds submit --project $(CLOUDBUILD_PROJECT) --config cloudbuild.yaml \
	  --service-account projects/$(CLOUDBUILD_PROJECT)/serviceAccounts/$(BUILD_SERVICE_ACCOUNT) \
	  --substitutions _REGISTRY=$(REGISTRY),_VERSION=$(VERSION),_COMMIT="$$(git rev-parse HEAD)" .

# make release: every artifact of release RELEASE (vVERSION) into
# bin/release/RELEASE, from a clean checkout (docs/releasing.md).
.PHONY: release
release: ## Build release VERSION=vX.Y.Z: the CLI (6 platforms), publisher, charts, functions' zip and SHA256SUMS into bin/release/vX.Y.Z, from a clean checkout; builds Helm if missing.
	$(GO) run ./internal/cmd/release -version $(RELEASE) -helm "$$($(HELM) path)"

.PHONY: controlplane
controlplane: ## Build kube-apiserver and etcd into the user cache (once per machine and version).
	$(CONTROLPLANE) build

.PHONY: bench
bench: ## Run every benchmark (about an hour) on the emulators and the control plane; write BENCHMARKS.md from the run, which it keeps as the benchdoc test's record.
	mkdir -p bin
	@echo "make bench: about an hour; each benchmark's line appears when it ends (the coalescing and the bill scenarios take 12 min each, the readers scenario 7)"
	@git diff --quiet HEAD 2>/dev/null || echo "make bench: tracked files differ from HEAD; BENCHMARKS.md will say the run measured uncommitted changes"
	$(WITH_CONTROLPLANE) $(GO) run ./internal/cmd/benchdoc -record > bin/bench.txt
	$(WITH_CONTROLPLANE) $(WITH_BROWSER) \
	$(ON_EMULATORS) bash -o pipefail -c '{ \
	  $(GO) test -run="^$$" -bench=. -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) -timeout=30m ./firestoredb/ ./fleetapi/ ./fleetapi/fleetmetrics/ && \
	  $(GO) test -run="^$$" -bench=. -skip="^BenchmarkReaders$$" -benchtime=1x -count=1 -timeout=90m ./emulator-tests/ -args $(BENCHFLAGS) && \
	  EMULATOR_NICE=idle $(ON_EMULATORS) env $(QUERY_GC) $(GO) test -run="^$$" -bench="^BenchmarkReaders$$" -benchtime=1x -count=1 -timeout=30m ./emulator-tests/ -args $(BENCHFLAGS); \
	  } | tee -a bin/bench.txt'
	$(GO) run ./internal/cmd/benchdoc -o BENCHMARKS.md bin/bench.txt
	cp bin/bench.txt internal/build/benchdoc/testdata/bench.txt

# How many seeded random histories make chaos runs, from seed FIRST (run
# shards side by side: make chaos SEEDS=500 FIRST=501).
SEEDS ?= 200
FIRST ?= 1

.PHONY: chaos
chaos: ## Randomized fault testing of the whole pipeline over SEEDS seeds (make test runs 20).
	$(WITH_CONTROLPLANE) \
	$(ON_EMULATORS) $(GO) test -run '^TestChaos$$' -count=1 -timeout=0 -v ./emulator-tests/ -args -chaos.seeds=$(SEEDS) -chaos.first=$(FIRST) \
	  | grep -E '^(=== RUN|--- FAIL|\s+--- FAIL|ok|FAIL|PASS)|chaos: |diverges|beside the pipeline|^\s+([0-9]+ms|state:) ' 

.PHONY: fuzz
fuzz: ## Run each fuzz test for FUZZTIME (default 30s).
	@for t in fleet:FuzzDocIDCodec fleet:FuzzParseDocID fleet:FuzzDecodeEvent fleetapi:FuzzParseQuery fleetapi:FuzzPageToken fleetapi:FuzzResumeToken; do \
	  $(GO) test -run='^$$' -fuzz="^$${t#*:}\$$" -fuzztime=$${FUZZTIME:-30s} ./$${t%%:*}/ || exit 1; \
	done

.PHONY: emulators-up
emulators-up: ## Start the emulators in the background; prints the variables to export.
	$(EMULATORS) start $(EMU_DIR)
	@echo "run: source $(EMU_DIR)/env"

.PHONY: emulators-down
emulators-down: ## Stop the emulators started by emulators-up.
	$(EMULATORS) stop $(EMU_DIR)
