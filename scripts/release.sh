#!/usr/bin/env bash
# Cross-build idem's static binaries into dist/, with SHA256SUMS and the third-party
# notices the binaries must ship with. `make release` runs it.
#
#   VERSION    stamped into the binaries (idem version); default: git describe
#   PLATFORMS  os/arch pairs; default: linux and darwin × amd64 and arm64
#
# CGO_ENABLED=0: pure Go (SQLite is modernc.org/sqlite), so each binary is static and
# runs on any libc, in a FROM scratch image too. -trimpath keeps the build host's
# paths out of the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
DIST=${DIST:-dist}

log() { printf 'release: %s\n' "$*" >&2; }

mkdir -p "$DIST"
built=()
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  out="$DIST/idem-$os-$arch"
  log "building $out ($VERSION)"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=auto \
    -ldflags "-s -w -X main.version=$VERSION" -o "$out" ./cmd/idem
  built+=("$(basename "$out")")
done

# Every module linked into the binary, with its license and NOTICE files: the
# MIT/BSD licenses ask that their text travel with the binary, Apache-2.0 that NOTICE
# files do.
notices="$DIST/THIRD_PARTY_NOTICES"
{
  echo "idem $VERSION links the Go standard library and the modules below."
  echo "Each module's license (and NOTICE, where it has one) follows its name."
  echo
  echo "== Go (the standard library, $($GO env GOVERSION)) =="
  cat "$($GO env GOROOT)/LICENSE"
  echo
  CGO_ENABLED=0 GOOS=linux "$GO" list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}} {{.Dir}}{{end}}{{end}}' ./cmd/idem |
    sort -u | while read -r path ver dir; do
      echo "== $path $ver =="
      found=
      for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE*; do
        [ -f "$f" ] || continue
        echo "-- $(basename "$f")"
        cat "$f"
        echo
        found=1
      done
      [ -n "$found" ] || echo "(no license file at the module's root; see https://pkg.go.dev/$path?tab=licenses)"
      echo
    done
} >"$notices"
cp LICENSE NOTICE "$DIST/"

(cd "$DIST" && sha256sum "${built[@]}" THIRD_PARTY_NOTICES LICENSE NOTICE >SHA256SUMS)
log "wrote $DIST/SHA256SUMS:"
cat "$DIST/SHA256SUMS" >&2
