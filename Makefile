# idem: `make test` is what CI runs (.ci/run). Services are checked (and started) first.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 3s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

# staticcheck, pinned: its version is the one whose findings the tree is clean of.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: test proof vet lint services bench bench-stores fmt tidy release image image-smoke

# The race detector instruments every package but modernc.org's: SQLite transpiled
# from C to Go, whose shared state is SQLite's own, behind SQLite's mutexes (Go
# sync.Mutex values in modernc.org/libc, which stay instrumented, so what they
# order is still seen). Instrumenting it found nothing and cost three quarters of
# the CPU of every test on SQLite, the embedded default (cmd/idem: 343 s of CPU
# against 198 s without it, the whole of make test 11.2 min against 8.9).
RACE ?= -race -gcflags='modernc.org/...=-race=false'

# Test binaries are linked without DWARF (-w): ~60 race binaries are linked on every
# run, and the debug info was a third of cmd/idem's link (9.4 s against 6.6 s).
# Stack traces and race reports use the symbol table, which stays.
LINK ?= -ldflags=-w

test: services vet lint
	IDEM_REQUIRE_SERVICES=1 IDEM_SCREENSHOT_DIR=$(CURDIR)/test-output $(GO) test $(RACE) $(LINK) -count=1 -timeout 30m $(PKGS)

# The broker adapters' exactly-once proofs (inboxtest.Proof) at the full figure,
# 10,000 messages each delivered at least twice; `make test` runs them with 3,000.
proof: services
	IDEM_REQUIRE_SERVICES=1 IDEM_PROOF_MESSAGES=10000 $(GO) test $(RACE) $(LINK) -count=1 -timeout 30m \
		-run 'ExactlyOnce(ByOffset|OnCluster|ThreeBrokers)?$$' ./idemnats ./idemkafka ./idemredis ./idemamqp ./idemsqs ./idempubsub

vet:
	$(GO) vet $(PKGS)

# staticcheck's default checks, clean; a finding that is intended says why where it
# stands (//lint:ignore CHECK reason). Installs the pinned version when missing.
lint:
	@$(STATICCHECK) -version 2>/dev/null | grep -q '($(STATICCHECK_VERSION:v%=%))' || \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) $(PKGS)

services:
	./scripts/services.sh

# Package benchmarks beside their raw baselines (see BENCHMARKS.md). Run serially so
# figures from one package are not disturbed by another's.
bench: services
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -p 1 ./idemmem ./idemsqlite ./idempg ./idemredis ./idemkey ./idemseq ./idemnats ./idemamqp ./idemkafka

# End-to-end store figures through the CLI, each beside its baseline.
bench-stores: services
	$(GO) run ./cmd/idem bench

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	$(GO) mod tidy

# Static binaries (CGO_ENABLED=0) for linux and darwin, amd64 and arm64, in dist/ with
# SHA256SUMS and THIRD_PARTY_NOTICES. VERSION=v0.1.0 stamps the release (idem version);
# by default it is git describe's. See docs/install.md.
release:
	VERSION=$(VERSION) GO=$(GO) ./scripts/release.sh

# The container image (Containerfile: FROM scratch, the static linux binary, CA
# certificates, /tmp; non-root) with podman's vfs driver, tagged localhost/idem:$(VERSION).
image:
	VERSION=$(VERSION) GO=$(GO) ./scripts/image.sh

# Runs the image's entrypoint from its mounted root filesystem (chroot; needs root):
# idem version, serve --help, and serve answering /healthz and a replayed POST.
image-smoke:
	./scripts/image-smoke.sh
