#!/usr/bin/env bash
# Build idem's container image from the Containerfile: the static linux binary of
# scripts/release.sh, the host's CA certificates and an empty /tmp. `make image` runs
# it. podman (and buildah) come from Debian; the vfs storage driver works where
# overlay mounts are refused (containers, CI runners).
#
#   VERSION  the image's version and the binary's stamp; default: git describe
#   ARCH     amd64 or arm64; default: this machine's
#   IMAGE    the tag; default: localhost/idem:$VERSION
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
ARCH=${ARCH:-$($GO env GOARCH)}
IMAGE=${IMAGE:-localhost/idem:$VERSION}
PODMAN=${PODMAN:-podman --storage-driver vfs}

log() { printf 'image: %s\n' "$*" >&2; }

if ! command -v podman >/dev/null 2>&1; then
  log "podman is missing: installing podman and buildah with apt-get"
  if [ "$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq podman buildah >/dev/null
fi

# The image's files, apart from dist/'s release (whose SHA256SUMS this leaves alone).
ctx=dist/image
rm -rf "$ctx"
PLATFORMS=linux/$ARCH VERSION=$VERSION GO=$GO DIST=$ctx ./scripts/release.sh
ca=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca" ] || { log "ERROR: no CA bundle at $ca (apt-get install ca-certificates)"; exit 1; }
cp "$ca" "$ctx/ca-certificates.crt"
mkdir -p "$ctx/rootfs/tmp" && chmod 1777 "$ctx/rootfs/tmp" # COPY keeps a directory's mode; --chmod would not reach it

log "building $IMAGE (linux/$ARCH)"
$PODMAN build --platform "linux/$ARCH" --build-arg "TARGETARCH=$ARCH" --build-arg "VERSION=$VERSION" \
  -f Containerfile -t "$IMAGE" .
echo "$IMAGE" >"$ctx/IMAGE"
log "built $IMAGE; smoke-test it with make image-smoke"
