# idem: `make test` is what CI runs (.ci/run). Services are checked (and started) first.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 3s

.PHONY: test vet services bench bench-stores fmt tidy

test: services vet
	IDEM_REQUIRE_SERVICES=1 IDEM_SCREENSHOT_DIR=$(CURDIR)/test-output $(GO) test -race -count=1 -timeout 15m $(PKGS)

vet:
	$(GO) vet $(PKGS)

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
