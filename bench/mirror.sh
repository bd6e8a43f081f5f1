#!/usr/bin/env bash
# Benchmark of `talos-gen mirror sync`, side by side with doing the same by
# hand: curl for the image artifacts and `skopeo copy --all` for the
# installer (every platform), both run concurrently as a careful operator
# would script it.
#
# 1. Upstreams on loopback: nginx as the factory's /image (xz artifacts of
#    random data), Debian's docker-registry with a factory-shaped installer
#    (OCI index over linux/amd64 + linux/arm64, random layers).
# 2. Cold: hyperfine, a fresh cache dir / fresh destination every run:
#    `mirror sync` vs curl + skopeo. Ratio = sync mean / by-hand mean,
#    target <= 1.0.
# 3. Warm re-sync (everything stored): hyperfine mean, target < 1 s; the
#    upstream access logs show no artifact GET during the warm runs.
#
# Usage: bench/mirror.sh [ASSET_MIB LAYER_MIB...]   (default: 64 48 16 1)
# Needs: nginx, docker-registry, skopeo, hyperfine, curl, jq, xz, sha256sum.
# Uses target/release/talos-gen (built if missing).
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): each background process is tracked by PID and stopped by
# bench/lib.sh's trap on EXIT.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${TALOS_GEN_BIN:-$ROOT/target/release/talos-gen}
ASSET_MIB=${1:-64}
shift || true
LAYERS=("$@")
[ ${#LAYERS[@]} -gt 0 ] || LAYERS=(48 16 1)
RUNS=${RUNS:-5}

for t in nginx docker-registry skopeo hyperfine curl jq xz sha256sum; do
  command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "missing $t (apt-get install -y $t)" >&2; exit 2; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$BIN" ] || cargo build --release
. "$ROOT/bench/lib.sh"

SCHEMATIC=ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515
TAG=v1.13.6
REPO=installer/$SCHEMATIC
ASSETS=(openstack-amd64.raw.xz metal-amd64.raw.xz)

echo "== upstreams"
NG_PORT=$(free_port)
mkdir -p "$WORK/nginx" "$WORK/root/image/$SCHEMATIC/$TAG"
for a in "${ASSETS[@]}"; do
  head -c $((ASSET_MIB * 1024 * 1024)) /dev/urandom | xz -0 -T0 > "$WORK/root/image/$SCHEMATIC/$TAG/$a"
done
cat > "$WORK/nginx/nginx.conf" <<EOF
master_process off; daemon off; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;
events { worker_connections 1024; }
http {
  access_log $WORK/nginx/access.log; client_body_temp_path $WORK/nginx/body; sendfile on;
  types { application/x-xz xz; } default_type application/octet-stream;
  server { listen 127.0.0.1:$NG_PORT; root $WORK/root; }
}
EOF
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" >/dev/null 2>&1 &
track $!
wait_http "http://127.0.0.1:$NG_PORT/"
FACTORY=http://127.0.0.1:$NG_PORT

UP_PORT=$(free_port)
start_registry reg "$UP_PORT"
UP=http://127.0.0.1:$UP_PORT
push_factory_image "$UP" "$REPO" "$TAG" "$WORK/img" "${LAYERS[@]}"
IMG_MIB=$(du -sm "$WORK/img" | cut -f1)
ART_MIB=$(du -sm "$WORK/root" | cut -f1)
echo "   artifacts: ${#ASSETS[@]} x ~${ASSET_MIB} MiB xz (${ART_MIB} MiB); installer: ${IMG_MIB} MiB (layers per arch: ${LAYERS[*]} MiB)"

cat > "$WORK/mirror.yaml" <<EOF
schematics: [$SCHEMATIC]
talosVersions: [$TAG]
images: [$(IFS=,; echo "${ASSETS[*]}")]
installers: [installer]
EOF

# The by-hand peer: curl every artifact and skopeo copy --all the installer, concurrently.
cat > "$WORK/by-hand.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
D=\$1; mkdir -p "\$D"
pids=()
for a in ${ASSETS[*]}; do
  curl -sSf -o "\$D/\$a" "$FACTORY/image/$SCHEMATIC/$TAG/\$a" & pids+=(\$!)
done
skopeo copy -q --all --src-tls-verify=false --retry-times 0 "docker://127.0.0.1:$UP_PORT/$REPO:$TAG" "dir:\$D/installer" & pids+=(\$!)
for p in "\${pids[@]}"; do wait "\$p"; done
EOF
chmod +x "$WORK/by-hand.sh"
SYNC="$BIN mirror sync --config $WORK/mirror.yaml --factory-url $FACTORY --registry-url $UP"

echo "== correctness: one sync, then serve --offline answers like the upstreams"
"$WORK/by-hand.sh" "$WORK/ref"
RUST_LOG=warn $SYNC --cache-dir "$WORK/check" > /dev/null 2>&1
SV_PORT=$(free_port)
RUST_LOG=warn "$BIN" serve --offline --listen "127.0.0.1:$SV_PORT" --cache-dir "$WORK/check" > "$WORK/serve.log" 2>&1 &
track $!
wait_http "http://127.0.0.1:$SV_PORT/healthz"
for a in "${ASSETS[@]}"; do
  curl -sSf "http://127.0.0.1:$SV_PORT/image/$SCHEMATIC/$TAG/$a" | cmp - "$WORK/ref/$a"
done
skopeo copy -q --all --src-tls-verify=false "docker://127.0.0.1:$SV_PORT/$REPO:$TAG" "dir:$WORK/offline-installer"
diff -r "$WORK/ref/installer" "$WORK/offline-installer" > /dev/null
echo "   identical"

echo "== cold: mirror sync vs curl + skopeo copy --all (fresh every run)"
hyperfine -N --runs "$RUNS" --export-json "$WORK/cold.json" \
  --prepare "rm -rf $WORK/cold $WORK/hand" \
  -n mirror-sync "$SYNC --cache-dir $WORK/cold" \
  -n curl+skopeo "$WORK/by-hand.sh $WORK/hand"
SY=$(jq '.results[] | select(.command=="mirror-sync") | .mean' "$WORK/cold.json")
BH=$(jq '.results[] | select(.command=="curl+skopeo") | .mean' "$WORK/cold.json")
COLD_RATIO=$(python3 -c "print(f'{$SY/$BH:.3f}')")

echo "== warm re-sync (everything stored)"
$SYNC --cache-dir "$WORK/cold" > /dev/null 2>&1
GETS_BEFORE=$(grep -c '"GET /image/' "$WORK/nginx/access.log" || true)
BLOBS_BEFORE=$(grep '"GET ' "$WORK/reg/log" | grep -c '/blobs/' || true)
hyperfine -N --warmup 1 --runs $((RUNS * 2)) --export-json "$WORK/warm.json" \
  -n mirror-sync-warm "$SYNC --cache-dir $WORK/cold"
WARM=$(jq '.results[0].mean' "$WORK/warm.json")
GETS_AFTER=$(grep -c '"GET /image/' "$WORK/nginx/access.log" || true)
BLOBS_AFTER=$(grep '"GET ' "$WORK/reg/log" | grep -c '/blobs/' || true)

echo
echo "SUMMARY"
echo "  content: ${ART_MIB} MiB of artifacts + ${IMG_MIB} MiB installer (2 platforms)"
echo "  cold: mirror sync ${SY}s / curl+skopeo ${BH}s = RATIO $COLD_RATIO (target <= 1.0)"
echo "  warm re-sync: ${WARM}s (target < 1 s); artifact GETs during warm runs: $((GETS_AFTER - GETS_BEFORE)) image, $((BLOBS_AFTER - BLOBS_BEFORE)) blob (target 0)"
ok=1
python3 -c "import sys; sys.exit(0 if $SY/$BH <= 1.0 else 1)" || ok=0
python3 -c "import sys; sys.exit(0 if $WARM < 1.0 else 1)" || ok=0
[ $((GETS_AFTER - GETS_BEFORE + BLOBS_AFTER - BLOBS_BEFORE)) = 0 ] || ok=0
[ $ok = 1 ] && echo "  PASS" || { echo "  FAIL"; exit 1; }
