#!/usr/bin/env bash
# Regenerates the checked-in protobuf code (internal/orderspb). Needs protoc
# (Debian: protobuf-compiler); installs protoc-gen-go and protoc-gen-go-grpc when
# missing. The generated files are committed: building and testing idem needs none
# of this.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler" >&2; exit 1; }
bin=$(go env GOPATH)/bin
[ -x "$bin/protoc-gen-go" ] || go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ -x "$bin/protoc-gen-go-grpc" ] || go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PATH=$bin:$PATH protoc -I internal/orderspb --go_out=. --go_opt=module=github.com/idemhq/idem \
  --go-grpc_out=. --go-grpc_opt=module=github.com/idemhq/idem internal/orderspb/orders.proto
