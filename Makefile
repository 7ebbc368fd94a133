# peerboot: the two commands a new machine needs are `make image` and `make test`.
GO      ?= go
BIN     := bin/peerboot
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
RECIPE  ?= recipes/default.toml

.PHONY: all deps image test e2e repro fuzz clean FORCE

all: $(BIN)

# peerboot itself, plus the two binaries that go into every image (static, no
# version stamp: their bytes depend on the source alone, so images reproduce).
$(BIN): FORCE
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/peerboot
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-buildid=" -o bin/peerboot-init ./cmd/peerboot-init
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-buildid=" -o bin/p2pcheck ./cmd/p2pcheck

# Host packages every stage needs; the list lives in `peerboot doctor`.
deps: $(BIN)
	scripts/deps.sh "$$($(BIN) doctor --packages)"

# The main job: fetch every pinned input (verified), then build the images into out/.
image: deps
	$(BIN) fetch $(RECIPE)
	$(BIN) build $(RECIPE)

# Two builds from cold stores, different dirs/users/TZ/locale/umask, compared byte for byte.
repro: $(BIN)
	scripts/repro-build.sh $(RECIPE) image

test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 80m ./...

# Only the QEMU boots (build + UEFI + PXE), also part of `make test`.
e2e: deps
	$(GO) test -count=1 -timeout 60m -v ./e2e/

# Short fuzz runs of every parser of outside bytes.
fuzz:
	sh scripts/fuzz.sh 30s

clean:
	rm -rf bin
