# peerboot: the two commands a new machine needs are `make image` and `make test`.
GO      ?= go
BIN     := bin/peerboot
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
RECIPE  ?= recipes/default.toml

.PHONY: all deps test-deps test-trees test-mirror sign-deps image test lint e2e repro fuzz mutants drivers clean FORCE

all: $(BIN)

# peerboot itself, plus the two binaries that go into every image (static, no
# version stamp: their bytes depend on the source alone, so images reproduce).
# Those two are replaced only when their bytes change: the plan keys them by a
# digest cached by stat, so an overlay edit's rebuild does not hash them again.
$(BIN): FORCE
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/peerboot
	$(call image-binary,peerboot-init)
	$(call image-binary,p2pcheck)

image-binary = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-buildid=" -o bin/$(1).new ./cmd/$(1) && \
	{ cmp -s bin/$(1).new bin/$(1) && rm bin/$(1).new || mv bin/$(1).new bin/$(1); }

# Host packages building needs (`make image`); the list lives in `peerboot doctor`.
deps: $(BIN)
	scripts/deps.sh "$$($(BIN) doctor --packages)"

# Those plus what signing, `peerboot run` (QEMU) and the tests need (`make test`):
# sbsigntool, QEMU/OVMF/iPXE ROMs, the cross-check tools, docker-registry,
# PostgreSQL, Chromium.
test-deps: $(BIN)
	scripts/deps.sh "$$($(BIN) doctor --packages --all)"

# Building's packages plus signing's (sbsigntool), for `make sign`.
sign-deps: $(BIN)
	scripts/deps.sh "$$($(BIN) doctor --packages --for build,sign)"

# The main job: fetch every pinned input (verified), then build the images into out/.
# CACHE_FLAGS adds a remote stage cache: --cache-from/--cache-to REPO, the keys
# (docs/remote-cache.md).
CACHE_FLAGS ?=
image: deps
	$(BIN) fetch $(RECIPE)
	$(BIN) build $(RECIPE) $(CACHE_FLAGS)

# RECIPE built up to STAGE (kernel, driver, ...) with CACHE_FLAGS: CI compiles each
# kernel and driver once and pushes it to the stage cache for the other jobs.
stage: deps
	$(BIN) fetch $(RECIPE)
	$(BIN) build $(RECIPE) --stage $(STAGE) $(CACHE_FLAGS)

# The remote stage cache's headline figure: builder B (empty store, --cache-from)
# against builder A's cold build, outputs compared byte for byte (docs/remote-cache.md).
cache-bench: $(BIN)
	scripts/cache-bench.sh $(RECIPE)

# The overlay-edit rebuild bench (issue 34) ROUNDS times (default 5) with the store
# copied onto an XFS loop mount, where the image stage clones (root, xfsprogs).
rebuild-bench-xfs: $(BIN)
	scripts/rebuild-bench-xfs.sh

# Two builds from cold stores, different dirs/users/TZ/locale/umask, compared byte for byte.
repro: $(BIN)
	scripts/repro-build.sh $(RECIPE) image

# The tests' fixtures come from the build it makes first, never a skip: the kernel
# stage output in the store (sign-file parity), the pinned systemd stub (UKI), and
# out/default/disk.img (flash). Under CI=true a test that misses one fails
# (internal/testguard), and scripts/skips.sh (go test -json behind a filter) fails
# the run on any other skip but -short's, listing every skipped test either way.
test: test-deps test-trees
	$(BIN) fetch $(RECIPE)
	$(BIN) build $(RECIPE)
	$(MAKE) lint
	GO=$(GO) scripts/skips.sh -timeout 80m ./...

# Tests that read pinned packages from suites that move (sid, experimental): the 5090
# lock's libnccl.so.2 laid out by the userspace stage. Not in `make test` (a package
# Debian has replaced would turn it red with no change here); the images workflow
# runs it, so a lock whose pins have left the mirror is seen at once.
test-mirror: $(BIN)
	$(GO) test -tags mirror -count=1 -run TestUserspaceNCCLOf5090Lock -v ./rootfs/

# NVIDIA's trees at the commits the driver tests read (the driver source of every
# recipe in the matrix, and driver/testdata/trees/*.toml for commits no recipe pins),
# fetched into the store by commit id, so a clone with nothing beside it tests
# without being told where the trees are. Release tarballs ($$PEERBOOT_NVIDIA_TREES,
# else ../shared/inputs/open-gpu-kernel-modules) are used instead when they are
# there; PEERBOOT_GIT_MIRRORS points the fetch at a local clone.
test-trees: $(BIN)
	@trees="$${PEERBOOT_NVIDIA_TREES:-$(CURDIR)/../shared/inputs/open-gpu-kernel-modules}"; \
	if [ -d "$$trees" ]; then echo "test-trees: the driver tests read the release tarballs in $$trees"; exit 0; fi; \
	set -e; for r in $$($(BIN) recipe matrix | jq -r '.include[].path') driver/testdata/trees/*.toml; do \
	  $(BIN) fetch --only driver-source $$r || { echo "test-trees: cannot fetch the driver source of $$r: set PEERBOOT_GIT_MIRRORS=URL=/path/to/a/clone, or PEERBOOT_NVIDIA_TREES to a directory of the release .tar.zst files" >&2; exit 5; }; \
	done

# gofmt, go vet and staticcheck, all clean (part of `make test`). staticcheck is
# pinned and installed under bin/tools by the module proxy on first use; the
# gpufake-tagged p2pcheck backend is checked too. A finding that is deliberate
# carries //lint:ignore CHECK reason at its line.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := bin/tools/staticcheck-$(STATICCHECK_VERSION)

$(STATICCHECK):
	GOBIN=$(CURDIR)/bin/tools/install $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv bin/tools/install/staticcheck $@

lint: $(STATICCHECK)
	@bad=$$(gofmt -l .); if [ -n "$$bad" ]; then echo "gofmt -l: not formatted:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags gpufake ./cmd/p2pcheck

# Only the QEMU boots (build + UEFI + PXE), also part of `make test`.
e2e: test-deps
	$(GO) test -count=1 -timeout 60m -v ./e2e/

# Short fuzz runs of every parser of outside bytes.
fuzz:
	sh scripts/fuzz.sh 30s

# Mutation testing (docs/testing.md): gremlins v0.6.0 (pinned in scripts/mutants) breaks
# one operator at a time in the packages whose checks users rely on and runs their tests
# with -short; each package's kill rate and survivors are compared with
# mutants/baseline.txt. Hours on two cores, so not part of `make test`: the mutants
# workflow runs it weekly, one job per package. MUTANTS=store make mutants: one package.
mutants:
	$(GO) run ./scripts/mutants $(MUTANTS_FLAGS) $(MUTANTS)

# The driver stage (the full module compiles `make test` leaves out: 6-45 min each on two
# cores) of every flavour the matrix builds. The driver stage needs only the kernel and
# driver sources, so a recipe whose NVIDIA installer cannot be downloaded here (it is
# imported with `peerboot store import`) still compiles; build says what is missing.
drivers: deps
	@set -e; for r in $$($(BIN) recipe matrix | jq -r '.include[].path'); do \
	  $(BIN) fetch $$r || echo "$$r: not every input fetched; building the driver stage from what is here"; \
	  $(BIN) build $$r --stage driver; \
	done

clean:
	rm -rf bin

# --- CI: .github/workflows/images.yml runs these targets, and only these; so can you.
OUTDIR       ?= out/$(basename $(notdir $(RECIPE)))
ARTIFACT_KEY ?= env:PEERBOOT_ARTIFACT_KEY
ARTIFACT_PUB ?= env:PEERBOOT_ARTIFACT_PUB
DB_KEY       ?=
DB_CERT      ?=

.PHONY: ci-matrix ci-stage-matrix lock-check stage-keys repro-compare short-digest sign verify publish stage cache-bench rebuild-bench-xfs

# The build matrix: every recipe with its driver flavour, as JSON (peerboot recipe matrix).
ci-matrix: $(BIN)
	@$(BIN) recipe matrix

# The matrix with one entry per distinct key of STAGE (kernel or driver), as JSON: the
# jobs that compile each kernel and each (kernel, driver) pair once.
ci-stage-matrix: $(BIN)
	@$(BIN) recipe matrix | jq -c '.include[]' | while read -r e; do \
	  p=$$(printf '%s' "$$e" | jq -r .path); \
	  k=$$($(BIN) plan --json "$$p" | jq -r --arg s "$(STAGE)" '.stages[] | select(.name == $$s) | .key'); \
	  printf '%s\n' "$$e" | jq -c --arg k "$$k" '. + {key: $$k}'; \
	done | jq -sc '{include: (group_by(.key) | map(.[0] | del(.key)))}'

# Fails with the diff when RECIPE's committed lock is not what a fresh resolve gives.
lock-check: $(BIN)
	$(BIN) lock --check $(RECIPE)

# name=action-key for every stage of RECIPE (the CI caches stage outputs under these).
stage-keys: $(BIN)
	@plan=$$($(BIN) plan --json $(RECIPE)) && printf '%s\n' "$$plan" | jq -r '.stages[] | .name + "=" + .key'

# Another build of RECIPE (OTHER=its output directory) must give the same SHA256SUMS.
repro-compare:
	@test -n "$(OTHER)" || { echo "usage: make repro-compare RECIPE=... OTHER=DIR" >&2; exit 2; }
	diff -u $(OTHER)/SHA256SUMS $(OUTDIR)/SHA256SUMS
	@echo "$(OUTDIR): SHA256SUMS identical to $(OTHER)'s"

# The first 12 hex digits of the sha256 of OUTDIR's SHA256SUMS: names one exact build.
short-digest:
	@sha256sum $(OUTDIR)/SHA256SUMS | cut -c1-12

# Sign OUTDIR (keys are references: file:PATH or env:VAR; DB_KEY/DB_CERT add Secure Boot).
sign: sign-deps
	$(BIN) sign $(OUTDIR) --artifact-key $(ARTIFACT_KEY) $(if $(DB_KEY),--db-key $(DB_KEY) --db-cert $(DB_CERT))

verify: $(BIN)
	$(BIN) verify $(OUTDIR) --key $(ARTIFACT_PUB) $(if $(DB_CERT),--db-cert $(DB_CERT))

# Push OUTDIR to REF (oci://REGISTRY/REPO:TAG), plus TAGS ("t1 t2") on the same manifest.
publish: $(BIN)
	@test -n "$(REF)" || { echo "usage: make publish RECIPE=... REF=oci://REGISTRY/REPO:TAG [TAGS=...]" >&2; exit 2; }
	$(BIN) publish $(OUTDIR) $(REF) $(foreach t,$(TAGS),--tag $(t))

# The generated references under docs/: cli/*.md and man/*.1 from the command tree,
# recipe-reference.md from the recipe schema. cmd/peerboot's TestDocsGenerated fails
# while the committed files differ from these.
.PHONY: docs
docs:
	$(GO) run ./cmd/peerboot docs --out docs
