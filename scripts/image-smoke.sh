#!/usr/bin/env bash
# Smoke-test the image `make image` built, without running a container (podman run
# needs setrlimit and namespaces some CI sandboxes refuse): mount the image, copy its
# root filesystem to a temporary directory, and run its entrypoint there with chroot
# as the image's user. Checks: the file list is the binary, CA bundle, notices and
# /tmp only; the user is not root; `idem version` names the version; `idem serve`
# starts (store in /tmp: the directory must be writable) in front of a throwaway
# upstream and answers /healthz, /metrics and a keyed POST twice (replayed). Needs
# root (chroot); `make image-smoke` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

PODMAN=${PODMAN:-podman --storage-driver vfs}
IMAGE=${IMAGE:-$(cat dist/image/IMAGE 2>/dev/null || true)}
[ -n "$IMAGE" ] || { echo "image-smoke: no image: run make image first (or set IMAGE)" >&2; exit 1; }

log() { printf 'image-smoke: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

user=$($PODMAN image inspect --format '{{.Config.User}}' "$IMAGE")
entry=$($PODMAN image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE")
log "image $IMAGE: user $user, entrypoint $entry"
case "$user" in "" | 0 | 0:* | root | root:*) fail "the image runs as root ($user)" ;; esac
[ "$entry" = '["/idem"]' ] || fail "entrypoint $entry, want [\"/idem\"]"

mnt=$($PODMAN image mount "$IMAGE")
root="$work/root"
mkdir -p "$root"
cp -a "$mnt/." "$root/"
$PODMAN image unmount "$IMAGE" >/dev/null

files=$(cd "$root" && find . -mindepth 1 | sort | tr '\n' ' ')
log "files: $files"
[ "$files" = "./LICENSE ./NOTICE ./THIRD_PARTY_NOTICES ./etc ./etc/ssl ./etc/ssl/certs ./etc/ssl/certs/ca-certificates.crt ./idem ./tmp " ] ||
  fail "unexpected files in the image: $files"
[ "$(stat -c %a "$root/tmp")" = 1777 ] || fail "/tmp is $(stat -c %a "$root/tmp"), want 1777 (writable by the non-root user)"

run() { chroot --userspec="$user" "$root" /idem "$@"; }

log "idem version:"
run version | tee "$work/version" >&2
grep -q '^idem ' "$work/version" || fail "idem version printed no version line"
run serve --help >"$work/help" 2>&1 || true
grep -q -- '-upstream' "$work/help" || fail "idem serve --help lists no --upstream"
log "idem serve --help lists its flags"

# Three free loopback ports: the upstream, the gateway, its admin listener.
read -r up gw adm < <(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])
[x.close() for x in s]')
python3 -c 'import http.server, sys, functools
class H(http.server.SimpleHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(201); self.send_header("Content-Length", "8"); self.end_headers(); self.wfile.write(b"created\n")
    do_GET = do_POST
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$up" >/dev/null 2>&1 </dev/null &
pids+=($!)
for _ in $(seq 1 200); do curl -fsS -o /dev/null "http://127.0.0.1:$up/orders" 2>/dev/null && break; sleep 0.1; done
# chroot execs idem: $! is the daemon itself, which cleanup stops (not a subshell).
chroot --userspec="$user" "$root" /idem serve --upstream "http://127.0.0.1:$up" --store sqlite:/tmp/gw.db \
  --listen "127.0.0.1:$gw" --admin-listen "127.0.0.1:$adm" >/dev/null 2>"$work/serve.log" </dev/null &
pids+=($!)
for _ in $(seq 1 200); do
  curl -fsS "http://127.0.0.1:$adm/healthz" >"$work/healthz" 2>/dev/null && break
  kill -0 "${pids[1]}" 2>/dev/null || { cat "$work/serve.log" >&2; fail "idem serve exited"; }
  sleep 0.1
done
log "GET /healthz:"
cat "$work/healthz" >&2
head -n 1 "$work/healthz" | grep -q '^ok' || { cat "$work/serve.log" >&2; fail "/healthz is not ok"; }
sed -n 2p "$work/healthz" | grep -q "^$(head -n 1 "$work/version")" || fail "/healthz does not name the build"
curl -fsS "http://127.0.0.1:$adm/metrics" | grep '^idem_build_info' >&2 || fail "/metrics has no idem_build_info"
for i in 1 2; do
  curl -sS -o /dev/null -D "$work/h$i" -X POST -H 'Idempotency-Key: smoke-1' -d '{}' "http://127.0.0.1:$gw/orders"
done
log "POST /orders twice with Idempotency-Key smoke-1: $(head -n 1 "$work/h1" | tr -d '\r') then $(head -n 1 "$work/h2" | tr -d '\r'), $(grep -i '^idempotent-replayed' "$work/h2" | tr -d '\r')"
grep -qi '^idempotent-replayed: true' "$work/h2" || fail "the second POST was not replayed"
[ -s "$root/tmp/gw.db" ] || fail "the store was not written to /tmp"
log "ok: $IMAGE runs as $user, serves /healthz and /metrics, replays a keyed POST, writes /tmp"
