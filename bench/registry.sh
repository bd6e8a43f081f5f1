#!/usr/bin/env bash
# Benchmark of the /v2/ pull-through, side by side with the peer a user
# would pick: Debian's distribution registry in proxy mode (proxy: remoteurl:)
# on the same upstream.
#
# 1. Upstream: docker-registry on loopback with a factory-shaped installer
#    image pushed over the registry API (OCI index over linux/amd64 and
#    linux/arm64 Docker schema-2 manifests, random layers).
# 2. Warm `skopeo copy --all` through talos-gen vs through the proxy registry
#    (both warmed first, rounds interleaved); ratio = talos-gen median /
#    proxy median, target <= 1.0.
# 3. 8 concurrent cold copies through a fresh talos-gen: every blob fetched
#    from the upstream exactly once (counted in the upstream's access log),
#    every copy identical. The same run against a fresh proxy registry is
#    shown for comparison.
#
# Usage: bench/registry.sh [LAYER_MIB...]   (default: 48 16 1, per arch)
# Needs: docker-registry, skopeo, curl, python3, sha256sum.
# Uses target/release/talos-gen (built if missing).
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): each background process is tracked by PID and stopped by
# bench/lib.sh's trap on EXIT.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${TALOS_GEN_BIN:-$ROOT/target/release/talos-gen}
LAYERS=("$@")
[ ${#LAYERS[@]} -gt 0 ] || LAYERS=(48 16 1)
RUNS=${RUNS:-10}

for t in docker-registry skopeo curl python3 sha256sum; do
  command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y $t)" >&2; exit 2; }
done
[ -x "$BIN" ] || cargo build --release
. "$ROOT/bench/lib.sh"

# start_service NAME PORT UPSTREAM
start_service() {
  local name=$1 port=$2 upstream=$3
  mkdir -p "$WORK/$name/cache"
  RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$port" --cache-dir "$WORK/$name/cache" \
    --registry-url "$upstream" > "$WORK/$name/log" 2>&1 &
  track $!
  wait_http "http://127.0.0.1:$port/healthz"
}

SCHEMATIC=ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515
REPO=installer/$SCHEMATIC
TAG=v1.13.6

UP_PORT=$(free_port); start_registry upstream "$UP_PORT"
UP=http://127.0.0.1:$UP_PORT
echo "== pushing a factory-shaped image to $UP/$REPO:$TAG (layers per arch: ${LAYERS[*]} MiB)"
push_factory_image "$UP" "$REPO" "$TAG" "$WORK/img" "${LAYERS[@]}"
BLOBS=$(cd "$WORK/img" && for f in *; do [ "$f" = index.json ] || [[ $f == *manifest.json ]] || echo "sha256:$(sha256sum "$f" | cut -d' ' -f1)"; done)
NBLOBS=$(echo "$BLOBS" | wc -l)
TOTAL_MIB=$(du -sm "$WORK/img" | cut -f1)
echo "   index $INDEX_DIGEST, $NBLOBS blobs, ${TOTAL_MIB} MiB"

copy() { # host dest
  skopeo copy -q --all --src-tls-verify=false --retry-times 0 "docker://$1/$REPO:$TAG" "dir:$2"
}

echo "== warm copy: talos-gen vs docker-registry proxy (proxy: remoteurl: $UP)"
TG_PORT=$(free_port); start_service talos-gen "$TG_PORT" "$UP"
PX_PORT=$(free_port); start_registry proxy "$PX_PORT" "$UP"
copy "127.0.0.1:$TG_PORT" "$WORK/ref-tg"
copy "127.0.0.1:$PX_PORT" "$WORK/ref-px"
copy "127.0.0.1:$UP_PORT" "$WORK/ref-direct"
diff -r "$WORK/ref-direct" "$WORK/ref-tg" >/dev/null || { echo "FAIL: talos-gen copy differs from direct copy" >&2; exit 1; }
diff -r "$WORK/ref-direct" "$WORK/ref-px" >/dev/null || echo "note: proxy copy differs from direct copy"
# Interleaved rounds (A B, then B A, ...) so the load of a shared machine
# falls on both alike; the ratio is of medians.
timed_copy() { # host -> seconds
  rm -rf "$WORK/w"
  local t0 t1; t0=$(date +%s.%N)
  copy "$1" "$WORK/w"
  t1=$(date +%s.%N)
  python3 -c "print($t1-$t0)"
}
for h in "127.0.0.1:$TG_PORT" "127.0.0.1:$PX_PORT" "127.0.0.1:$UP_PORT"; do copy "$h" "$WORK/warmup-$RANDOM"; done
: > "$WORK/tg.times"; : > "$WORK/px.times"; : > "$WORK/di.times"
for i in $(seq "$RUNS"); do
  if [ $((i % 2)) = 1 ]; then
    timed_copy "127.0.0.1:$TG_PORT" >> "$WORK/tg.times"; timed_copy "127.0.0.1:$PX_PORT" >> "$WORK/px.times"
  else
    timed_copy "127.0.0.1:$PX_PORT" >> "$WORK/px.times"; timed_copy "127.0.0.1:$TG_PORT" >> "$WORK/tg.times"
  fi
  timed_copy "127.0.0.1:$UP_PORT" >> "$WORK/di.times"
done
median() { python3 -c "import statistics,sys; print(f'{statistics.median(float(l) for l in open(sys.argv[1])):.3f}')" "$1"; }
spread() { python3 -c "import sys; v=sorted(float(l) for l in open(sys.argv[1])); print(f'{v[0]:.3f}..{v[-1]:.3f}')" "$1"; }
TG_MEAN=$(median "$WORK/tg.times"); PX_MEAN=$(median "$WORK/px.times"); DI_MEAN=$(median "$WORK/di.times")
WARM_RATIO=$(python3 -c "print(f'{$TG_MEAN/$PX_MEAN:.3f}')")
echo "   warm median over $RUNS interleaved rounds: talos-gen ${TG_MEAN}s ($(spread "$WORK/tg.times")), registry-proxy ${PX_MEAN}s ($(spread "$WORK/px.times")), direct from upstream ${DI_MEAN}s ($(spread "$WORK/di.times"))"
echo "   RATIO warm talos-gen/registry-proxy = $WARM_RATIO (target <= 1.0)"

# cold_run NAME HOST-PORT LOGFILE-OF-UPSTREAM
cold_run() {
  local name=$1 port=$2
  local before; before=$(wc -l < "$WORK/upstream/log")
  local t0; t0=$(date +%s.%N)
  local pids=()
  for i in $(seq 8); do
    copy "127.0.0.1:$port" "$WORK/cold-$name-$i" & pids+=($!)
  done
  local fail=0
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  local t1; t1=$(date +%s.%N)
  [ $fail = 0 ] || { echo "FAIL: a cold copy through $name failed" >&2; exit 1; }
  for i in $(seq 8); do
    diff -r "$WORK/ref-direct" "$WORK/cold-$name-$i" >/dev/null || { echo "FAIL: cold copy $i through $name differs" >&2; exit 1; }
  done
  tail -n +"$((before + 1))" "$WORK/upstream/log" > "$WORK/cold-$name.log"
  local max=0 sum=0
  for d in $BLOBS; do
    n=$(grep -c "\"GET /v2/$REPO/blobs/$d" "$WORK/cold-$name.log" || true)
    sum=$((sum + n)); [ "$n" -gt "$max" ] && max=$n
  done
  echo "   $name: 8 cold copies in $(python3 -c "print(f'{$t1-$t0:.2f}')")s, identical; upstream blob GETs: $sum for $NBLOBS blobs (max per blob $max)"
  eval "COLD_MAX_$name=$max"
}

echo "== 8 concurrent cold copies"
TG2_PORT=$(free_port); start_service tg_cold "$TG2_PORT" "$UP"
cold_run tg_cold "$TG2_PORT"
PX2_PORT=$(free_port); start_registry px_cold "$PX2_PORT" "$UP"
cold_run px_cold "$PX2_PORT"

echo
echo "SUMMARY"
echo "  image: ${TOTAL_MIB} MiB, $NBLOBS blobs (layers per arch: ${LAYERS[*]} MiB)"
echo "  warm skopeo copy --all (median): talos-gen ${TG_MEAN}s / registry-proxy ${PX_MEAN}s = $WARM_RATIO (target <= 1.0)"
echo "  8 cold copies: max upstream GETs per blob: talos-gen $COLD_MAX_tg_cold (target 1), registry-proxy $COLD_MAX_px_cold"
ok=1
python3 -c "import sys; sys.exit(0 if $TG_MEAN/$PX_MEAN <= 1.0 else 1)" || ok=0
[ "$COLD_MAX_tg_cold" = 1 ] || ok=0
[ $ok = 1 ] && echo "  PASS" || { echo "  FAIL"; exit 1; }
