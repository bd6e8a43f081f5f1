#!/usr/bin/env bash
# Load test of `talos-gen serve` on loopback, bounded in time.
#
# Upstreams: nginx serving a generated xz artifact at /image/S/V/A, and
# Debian's docker-registry holding a factory-shaped installer image
# (index -> linux/amd64 manifest -> config + 2 layers) at installer/S:V.
# The service is warmed (artifact, manifest, blobs in its store), then the load client
# runs CLIENTS concurrent connections for DURATION seconds, each rotating
# through: cached artifact GET, 64 KiB Range GET at a random offset,
# manifest HEAD (by tag), blob GET. The client is examples/loadgen.rs
# (wrk cannot send HEAD: it waits for a body that never comes). Must hold: zero errors (socket errors,
# timeouts, non-2xx/3xx), and file descriptors and RSS back to their level
# before the run. Reports requests/s, p99 latency, peak RSS.
#
# Side by side: the mix limited to what a static server can do (artifact
# GETs and Range GETs) against nginx serving the same file, as a ratio
# (talos-gen req/s / nginx req/s).
#
# Usage: bench/load.sh [CLIENTS] [DURATION_S]   (default 200 60)
# Needs: nginx (nginx-light), docker-registry, curl, xz, python3.
# Uses target/release/talos-gen (built if missing).
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): each background process is tracked by PID and stopped by
# bench/lib.sh's trap on EXIT.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${TALOS_GEN_BIN:-$ROOT/target/release/talos-gen}
CLIENTS=${1:-200}
DURATION=${2:-60}
ART_MIB=${ART_MIB:-2}

for t in nginx docker-registry curl xz python3 sha256sum; do
  command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "missing $t" >&2; exit 2; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$BIN" ] || cargo build --release --bin talos-gen
LOADGEN=${LOADGEN:-$ROOT/target/release/examples/loadgen}
[ -x "$LOADGEN" ] || cargo build --release --example loadgen
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

. "$ROOT/bench/lib.sh"

S=376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba
V=v1.13.6
A=openstack-amd64.raw.xz
REPO=installer/$S

echo "== upstreams"
mkdir -p "$WORK/root/image/$S/$V" "$WORK/nginx"
head -c $((ART_MIB * 1024 * 1024)) /dev/urandom > "$WORK/disk.raw"
head -c $((1024 * 1024)) /dev/zero >> "$WORK/disk.raw"
xz -0 -T1 -c "$WORK/disk.raw" > "$WORK/root/image/$S/$V/$A"
ART_SIZE=$(stat -c %s "$WORK/root/image/$S/$V/$A")
NG_PORT=$(free_port)
cat > "$WORK/nginx/nginx.conf" <<NGX
master_process off;
daemon off;
worker_rlimit_nofile 65536;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  sendfile on;
  keepalive_requests 1000000;
  default_type application/octet-stream;
  server { listen 127.0.0.1:$NG_PORT; root $WORK/root; }
}
NGX
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" >/dev/null 2>&1 &
track $!
wait_http "http://127.0.0.1:$NG_PORT/"

REG_PORT=$(free_port)
start_registry reg "$REG_PORT" "" "{level: warn, accesslog: {disabled: true}}"
UP=http://127.0.0.1:$REG_PORT

mkdir -p "$WORK/img"
head -c $((1024 * 1024)) /dev/urandom > "$WORK/img/l0"
head -c $((64 * 1024)) /dev/urandom > "$WORK/img/l1"
L0=$(push_blob "$UP" "$REPO" "$WORK/img/l0"); L1=$(push_blob "$UP" "$REPO" "$WORK/img/l1")
printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["%s","%s"]}}' "$L0" "$L1" > "$WORK/img/config.json"
CFG=$(push_blob "$UP" "$REPO" "$WORK/img/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":%s,"digest":"%s"},"layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":%s,"digest":"%s"},{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":%s,"digest":"%s"}]}' \
  "$(stat -c %s "$WORK/img/config.json")" "$CFG" "$(stat -c %s "$WORK/img/l0")" "$L0" "$(stat -c %s "$WORK/img/l1")" "$L1" > "$WORK/img/manifest.json"
MD="sha256:$(sha256sum "$WORK/img/manifest.json" | cut -d' ' -f1)"
push_manifest "$UP" "$REPO" "$MD" application/vnd.docker.distribution.manifest.v2+json "$WORK/img/manifest.json"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","size":%s,"digest":"%s","platform":{"architecture":"amd64","os":"linux"}}]}' \
  "$(stat -c %s "$WORK/img/manifest.json")" "$MD" > "$WORK/img/index.json"
push_manifest "$UP" "$REPO" "$V" application/vnd.oci.image.index.v1+json "$WORK/img/index.json"
echo "   artifact $ART_SIZE bytes; image $REPO:$V (layers 1 MiB + 64 KiB)"

echo "== talos-gen serve ($BIN)"
TG_PORT=$(free_port)
mkdir -p "$WORK/cache"
RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$TG_PORT" --cache-dir "$WORK/cache" \
  --factory-url "http://127.0.0.1:$NG_PORT" --registry-url "$UP" > "$WORK/serve.log" 2>&1 &
TG_PID=$!
track "$TG_PID"
TG=http://127.0.0.1:$TG_PORT
wait_http "$TG/healthz"
# Warm: the artifact, the tag, the manifest, the blobs.
ACC='application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json'
curl -sf -o "$WORK/got.xz" "$TG/image/$S/$V/$A"
cmp -s "$WORK/got.xz" "$WORK/root/image/$S/$V/$A" || { echo "FAIL: artifact differs" >&2; exit 1; }
curl -sf -o /dev/null -H "Accept: $ACC" "$TG/v2/$REPO/manifests/$V"
curl -sf -o /dev/null -H "Accept: $ACC" "$TG/v2/$REPO/manifests/$MD"
for d in "$CFG" "$L0" "$L1"; do curl -sf -o /dev/null "$TG/v2/$REPO/blobs/$d"; done
# Read each once more from the store: the store keeps a read object's file
# open while it holds the object (at most 128 idle), so the baseline counts
# them and a descriptor left behind by a request shows as a difference.
curl -sf -o /dev/null "$TG/image/$S/$V/$A"
curl -sf -o /dev/null -H "Accept: $ACC" "$TG/v2/$REPO/manifests/$V"
curl -sf -o /dev/null -H "Accept: $ACC" "$TG/v2/$REPO/manifests/$MD"
for d in "$CFG" "$L0" "$L1"; do curl -sf -o /dev/null "$TG/v2/$REPO/blobs/$d"; done
sleep 1
FD0=$(fds $TG_PID); RSS0=$(status_kib $TG_PID VmRSS); ANON0=$(status_kib $TG_PID RssAnon)
echo "   before: fds=$FD0 rss=${RSS0}KiB anon=${ANON0}KiB"

echo "== load: $CLIENTS connections, ${DURATION}s, mix: artifact GET / Range GET / manifest HEAD / blob GET"
PEAK=$RSS0
( while kill -0 $TG_PID 2>/dev/null; do r=$(status_kib $TG_PID VmRSS); [ "${r:-0}" -gt "$PEAK" ] && PEAK=$r && echo "$PEAK" > "$WORK/peak"; sleep 0.2; done ) &
SAMPLER=$!
track "$SAMPLER"
"$LOADGEN" "$TG" "$CLIENTS" "$DURATION" get,range,head,blob \
  "/image/$S/$V/$A" "$ART_SIZE" "/v2/$REPO/manifests/$V" \
  "/v2/$REPO/blobs/$L0" "/v2/$REPO/blobs/$L1" "/v2/$REPO/blobs/$CFG" | tee "$WORK/load.out"
kill $SAMPLER 2>/dev/null || true
HWM=$(status_kib $TG_PID VmHWM)
PEAK_SAMPLED=$(cat "$WORK/peak" 2>/dev/null || echo "$RSS0")
sleep 3
FD1=$(fds $TG_PID); RSS1=$(status_kib $TG_PID VmRSS); ANON1=$(status_kib $TG_PID RssAnon)
echo "   after:  fds=$FD1 rss=${RSS1}KiB anon=${ANON1}KiB; peak rss (VmHWM) ${HWM}KiB, sampled ${PEAK_SAMPLED}KiB"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; }
REQS=$(field requests "$WORK/load.out"); ERRORS=$(field errors "$WORK/load.out")
RPS=$(field rps "$WORK/load.out"); P99=$(field p99_ms "$WORK/load.out")

SHORT=$(( DURATION / 4 > 5 ? DURATION / 4 : 5 ))
echo "== side by side: artifact + Range GETs only, talos-gen vs nginx (same file, ${SHORT}s each)"
side() { "$LOADGEN" "$1" "$CLIENTS" "$SHORT" get,range "/image/$S/$V/$A" "$ART_SIZE" /unused /unused | tee -a "$WORK/side.out" | sed -n 's/.* rps=\([^ ]*\).*/\1/p'; }
TG_STATIC=$(side "$TG")
NG_STATIC=$(side "http://127.0.0.1:$NG_PORT")
cat "$WORK/side.out"
RATIO=$(python3 -c "print(f'{$TG_STATIC/$NG_STATIC:.2f}')")
sleep 3
FD2=$(fds $TG_PID); RSS2=$(status_kib $TG_PID VmRSS); ANON2=$(status_kib $TG_PID RssAnon)

echo
echo "RESULT clients=$CLIENTS duration=${DURATION}s requests=$REQS req/s=$RPS p99=${P99}ms errors=$ERRORS"
echo "RESULT peak_rss=${HWM}KiB start_rss=${RSS0}KiB end_rss=${RSS1}KiB start_anon=${ANON0}KiB end_anon=${ANON1}KiB fds start=$FD0 end=$FD1 (after side run: fds=$FD2 anon=${ANON2}KiB)"
echo "RESULT static mix req/s: talos-gen $TG_STATIC, nginx $NG_STATIC, RATIO talos-gen/nginx = $RATIO $(python3 -c "print('PASS' if $TG_STATIC >= 0.9 * $NG_STATIC else 'FAIL')") (>= 0.9)"
fail=0
[ "$ERRORS" -eq 0 ] || { echo "FAIL: $ERRORS errors" >&2; fail=1; }
[ "$FD1" -le $((FD0 + 2)) ] || { echo "FAIL: file descriptors $FD0 -> $FD1" >&2; fail=1; }
# Anonymous memory back near the start (allocator slack allowed: 16 MiB).
[ "$ANON1" -le $((ANON0 + 16384)) ] || { echo "FAIL: anonymous RSS $ANON0 -> $ANON1 KiB" >&2; fail=1; }
exit $fail
