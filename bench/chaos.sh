#!/usr/bin/env bash
# A chaos run: faults drawn at random, overlapping, for MINUTES minutes,
# every answer checked by an independent ledger, on loopback.
#
# Topology: two `talos-gen serve` replicas on one Garage bucket (one node;
# each its own --cache-dir spool and local tier) and one replica on a local
# --cache-dir on a small tmpfs (VOL_MIB, default 48), all behind nginx as
# the factory (xz artifacts of random data) and docker-registry (two
# two-platform images) through --mirror-upstream ghcr.io=...
#
# Clients (examples/chaos_client.rs): CDI-like HEAD + whole GETs, ranged
# reads, slow readers, containerd-like pulls through /v2/...?ns=ghcr.io,
# each at a random replica; every answer judged against the true bytes the
# script generated (a cut: refused, reset, short, timed out or 5xx; WRONG: a
# clean 200/206 with wrong or short bytes, or a HEAD that lies).
#
# Faults, each kind its own loop, bounded intervals, overlapping:
#   kill     kill -9 of a replica, restarted after 1-5 s;
#   freeze   Garage SIGSTOPped 5-60 s then SIGCONT (how long each bucket
#            replica's /readyz took to turn, and the recovery: until both
#            answer /readyz 200 and a whole GET of a mirrored artifact right);
#   factory  nginx stopped 5-20 s, or lying 5-20 s (switched by a reload to
#            proxy_pass to examples/fault_upstream.rs: short body, flipped
#            byte, stall, in turn);
#   fill     the local volume filled to its last MiB for 5-20 s;
#   mirror   the mirror job against both stores, from a sixth of the run on,
#            every 20-50 s in turn: `mirror sync --prune` with a config
#            naming fewer keys than the first sync's (B), a `mirror export` /
#            `mirror import` cycle (the local store into the bucket and
#            back), `mirror sync` with the first config (A) again; a first
#            try in three killed (kill -9) 0.1-0.9 s in; each tried again
#            (at most 4 times, 10 s apart) until it exits 0.
# At the end: `mirror verify` of both stores finds nothing bad; every key the
# last config names is present, pinned and maps to the digest the first
# sync stored (the index read directly: the local store's index/ files and
# the bucket listed with curl --aws-sigv4, not through talos-gen); the local
# store and each local tier within their bounds; descriptors and RssAnon of
# each replica back near their start; every process stopped, none left.
# ONE last line (CHAOS ...) with the figures; exit 1 on any wrong answer,
# lost or repointed key, broken bound or leftover, 2 on bad usage.
#
# Usage: bench/chaos.sh [MINUTES]   (default 30; at most 600)
# Env: TALOS_GEN_BIN (default target/release/talos-gen; the examples are
# taken from its folder's examples/: build them with `cargo build --release
# --examples`), CHAOS_SEED (default: random, printed), CHAOS_CLIENTS (8),
# ARTIFACT_MIB (2), VOL_MIB (48), CHAOS_KEEP=DIR (copy the logs there).
# Needs: garage (cargo install garage), nginx, docker-registry, curl, xz,
# python3, fallocate, root (mount -t tmpfs).
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): each background process is tracked by PID and stopped by
# bench/lib.sh's trap on EXIT, Garage continued first, the tmpfs unmounted.
set -euo pipefail

MINUTES=${1:-30}
[[ $MINUTES =~ ^[0-9]+$ ]] && [ "$MINUTES" -ge 1 ] && [ "$MINUTES" -le 600 ] ||
  { echo "usage: bench/chaos.sh [MINUTES] (1 to 600)" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TALOS_GEN_BIN:-$HERE/target/release/talos-gen}
EX=$(dirname "$BIN")/examples
GARAGE=${GARAGE:-$(command -v garage || echo "$HOME/.cargo/bin/garage")}
SEED=${CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
CLIENTS=${CHAOS_CLIENTS:-8}
ART_MIB=${ARTIFACT_MIB:-2}
VOL_MIB=${VOL_MIB:-48}
. "$HERE/bench/lib.sh"
need_tools nginx docker-registry curl xz python3 fallocate mount "$GARAGE"
need_bin
for e in chaos_client fault_upstream; do
  [ -x "$EX/$e" ] || { echo "build the examples first: cargo build --release --examples ($EX/$e)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "chaos.sh mounts a tmpfs: run it as root" >&2; exit 2; }
W=$WORK
RANDOM=$SEED
# A step of the script itself that fails names its line.
trap 'echo "chaos.sh: line $LINENO failed (exit $?): $BASH_COMMAND" >&2' ERR
DUR=$((MINUTES * 60))
echo "# chaos: $MINUTES min, seed $SEED, $CLIENTS clients, load $(cut -d' ' -f1-3 /proc/loadavg)"

on_cleanup() {
  [ -n "${CHAOS_KEEP:-}" ] && mkdir -p "$CHAOS_KEEP" &&
    cp -r "$W"/*.log "$W"/faults "$W"/ledger.* "$W"/files "$W"/index-* "$W"/verify.* "$W/garage/log" "$CHAOS_KEEP/" 2>/dev/null
  mountpoint -q "$W/vol" && { umount "$W/vol" || umount -l "$W/vol"; }
  return 0
}

rnd() { echo $(($1 + RANDOM % ($2 - $1 + 1))); } # lo hi
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
log_fault() { echo "$(date +%T) $*" >> "$W/faults"; }
stopping() { [ -e "$W/stop" ]; }
# nap SECS: sleep, but return early (1) once the run is stopping.
nap() { local i; for ((i = 0; i < $1 * 4; i++)); do stopping && return 1; sleep 0.25; done; return 0; }

# --- the truth: artifacts and images -------------------------------------
S=376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba
VERSIONS=(v1.13.6 v1.13.5)
PLATFORMS=(openstack metal nocloud aws)
echo "# generating ${#VERSIONS[@]}x${#PLATFORMS[@]} artifacts of $ART_MIB MiB (xz of random data)"
: > "$W/spec"
for v in "${VERSIONS[@]}"; do
  mkdir -p "$W/root/image/$S/$v"
  for p in "${PLATFORMS[@]}"; do
    f=$W/root/image/$S/$v/$p-amd64.raw.xz
    head -c $((ART_MIB << 20)) /dev/urandom | xz -0 -T1 -c > "$f"
    echo "artifact /image/$S/$v/$p-amd64.raw.xz $f" >> "$W/spec"
  done
done
# The artifact the freeze recovery reads (a mirrored one).
PROBE_PATH=/image/$S/v1.13.6/openstack-amd64.raw.xz
PROBE_SHA=$(sha256sum "$W/root$PROBE_PATH" | cut -d' ' -f1)

echo "# garage: one node"
GP=$(free_port); GS=$(free_port)
mkdir -p "$W/garage/meta" "$W/garage/data"
cat > "$W/garage/garage.toml" <<EOF
metadata_dir = "$W/garage/meta"
data_dir = "$W/garage/data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$GP"
rpc_public_addr = "127.0.0.1:$GP"
rpc_secret = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$GS"
EOF
g() { RUST_LOG=warn "$GARAGE" -c "$W/garage/garage.toml" "$@"; }
RUST_LOG=warn "$GARAGE" -c "$W/garage/garage.toml" server > "$W/garage/log" 2>&1 &
GPID=$!
track "$GPID"
# Garage's RPC can take a while to listen on a loaded machine (a suite's
# builds beside it): up to 60 s, then a clear failure.
for _ in $(seq 600); do g node id -q > /dev/null 2>&1 && break; sleep 0.1; done
ID=$(g node id -q | cut -d@ -f1) || { echo "garage did not answer within 60 s" >&2; tail -5 "$W/garage/log" >&2; exit 1; }
for _ in $(seq 50); do g layout assign -z z0 -c 1G "$ID" > /dev/null 2>&1 && break; sleep 0.2; done
for _ in $(seq 50); do g layout apply --version 1 > /dev/null 2>&1 && break; sleep 0.2; done
for _ in $(seq 100); do g bucket create talos-gen > /dev/null 2>&1 && break; sleep 0.2; done
KEY=$(g key create chaos)
export AWS_ACCESS_KEY_ID=$(awk '/Key ID:/{print $3}' <<< "$KEY")
export AWS_SECRET_ACCESS_KEY=$(awk '/Secret key:/{print $3}' <<< "$KEY")
g bucket allow --read --write --owner talos-gen --key chaos > /dev/null
EP=http://127.0.0.1:$GS
S3=(--store s3://talos-gen/store --s3-endpoint "$EP")

echo "# docker-registry with two images"
RP=$(free_port)
start_registry reg "$RP" "" "{level: warn}"
push_factory_image "http://127.0.0.1:$RP" chaos/app v1 "$W/img-app" 1 1
APP_INDEX=${INDEX_DIGEST#sha256:}
push_factory_image "http://127.0.0.1:$RP" chaos/tool v2 "$W/img-tool" 1
TOOL_INDEX=${INDEX_DIGEST#sha256:}
for d in "$W/img-app" "$W/img-tool"; do
  for f in "$d"/*; do echo "object $(sha256sum "$f" | cut -d' ' -f1) $f" >> "$W/spec"; done
done
echo "image ghcr.io chaos/app v1 $APP_INDEX" >> "$W/spec"
echo "image ghcr.io chaos/tool v2 $TOOL_INDEX" >> "$W/spec"

# --- the factory: nginx, switched to the fault server to lie --------------
FP=$(free_port)
"$EX/fault_upstream" "$FP" "$W/root" 40 > "$W/fault_upstream.log" 2>&1 &
track $!
NP=$(free_port)
mkdir -p "$W/nginx"
factory_conf() { # good|lie
  local loc="root $W/root;"
  [ "$1" = lie ] && loc="location / { proxy_pass http://127.0.0.1:$FP; proxy_buffering off; proxy_read_timeout 30s; }"
  cat > "$W/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
user root;
error_log $W/nginx/error.log;
pid $W/nginx/nginx.pid;
events { worker_connections 1024; }
http {
  client_body_temp_path $W/nginx/body;
  proxy_temp_path $W/nginx/tmp;
  access_log $W/nginx/access.log;
  server { listen 127.0.0.1:$NP; $loc }
}
EOF
}
factory_start() {
  factory_conf good
  nginx -c "$W/nginx/nginx.conf" -p "$W/nginx" 2>> "$W/nginx/error.log" &
  echo $! > "$W/pid.nginx"
  track "$(cat "$W/pid.nginx")"
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$NP/" && return 0; sleep 0.1; done
  return 1
}
factory_start

# --- the stores and the replicas -----------------------------------------
mkdir -p "$W/vol"
mount -t tmpfs -o "size=${VOL_MIB}m" tmpfs "$W/vol"
LOC=$W/vol/store
TIER_MAX=$((6 << 20))
LOC_MAX=$((20 << 20))
declare -A PORT=([s3a]=$(free_port) [s3b]=$(free_port) [loc]=$(free_port))
REPLICAS=(s3a s3b loc)
start_replica() { # name: started, tracked, its PID in $W/pid.NAME; 1 if it died or was not up in 60 s
  local n=$1 where p
  if [ "$n" = loc ]; then
    where=(--cache-dir "$LOC" --cache-max-size "$LOC_MAX")
  else
    where=(--cache-dir "$W/$n" "${S3[@]}" --local-cache-max-size "$TIER_MAX")
  fi
  RUST_LOG=${CHAOS_LOG:-warn} "$BIN" serve --listen "127.0.0.1:${PORT[$n]}" "${where[@]}" \
    --factory-url "http://127.0.0.1:$NP" --mirror-upstream "ghcr.io=http://127.0.0.1:$RP" \
    --upstream-timeout 10s >> "$W/$n.log" 2>&1 &
  p=$!
  disown "$p" 2> /dev/null || true # its kill -9 is no job notice of this shell's
  echo "$p" > "$W/pid.$n"
  track "$p"
  for _ in $(seq 600); do
    curl -s -o /dev/null -m 2 "http://127.0.0.1:${PORT[$n]}/healthz" && return 0
    pid_alive "$p" || return 1
    sleep 0.1
  done
  return 1
}
# supervise NAME: start it again until it is up, as a pod's controller
# would (a replica that starts while the bucket is frozen exits: it cannot
# open the store); one line per start that failed; 1 after 3 minutes.
supervise() {
  local n=$1 t=0
  until start_replica "$n"; do
    t=$((t + 1))
    log_fault "restart-again $n (start $t exited: $(tail -1 "$W/$n.log" | cut -c1-160))"
    [ "$t" -lt 60 ] || return 1
    sleep 2
  done
}
pid_of() { cat "$W/pid.$1"; }

# Mirror configs: A names three platforms of v1.13.6 and chaos/app; B (the
# run's prune) two of them: nocloud is dropped mid-run.
cat > "$W/mirror-a.yaml" <<EOF
schematics: [$S]
talosVersions: [v1.13.6]
images: [openstack-amd64.raw.xz, metal-amd64.raw.xz, nocloud-amd64.raw.xz]
extraImages: [ghcr.io/chaos/app:v1]
EOF
sed 's/, nocloud-amd64.raw.xz//' "$W/mirror-a.yaml" > "$W/mirror-b.yaml"
MIRROR=(--factory-url "http://127.0.0.1:$NP" --mirror-upstream "ghcr.io=http://127.0.0.1:$RP")
echo "# first mirror sync (config A) into both stores"
mkdir -p "$W/spool"
"$BIN" mirror sync --config "$W/mirror-a.yaml" "${MIRROR[@]}" "${S3[@]}" --cache-dir "$W/spool" > "$W/mirror.log" 2>&1 ||
  { cat "$W/mirror.log" >&2; echo "the first mirror sync into the bucket failed" >&2; exit 1; }
"$BIN" mirror sync --config "$W/mirror-a.yaml" "${MIRROR[@]}" --cache-dir "$LOC" >> "$W/mirror.log" 2>&1 ||
  { cat "$W/mirror.log" >&2; echo "the first mirror sync into the local store failed" >&2; exit 1; }

# index_dump dir DIR | index_dump s3: "key digest pinned|cached" per entry,
# read from the store's own index files (not through talos-gen).
index_dump() {
  python3 - "$@" "$EP" <<'PY'
import glob, json, os, re, subprocess, sys, urllib.parse
def show(body):
    try:
        e = json.loads(body)
    except ValueError:
        return
    print(e["key"].replace(" ", "%20"), e["digest"], "pinned" if e.get("pinned") else "cached")
if sys.argv[1] == "dir":
    for f in sorted(glob.glob(sys.argv[2] + "/index/*.json")):
        with open(f, "rb") as fh:
            show(fh.read())
else:
    ep = sys.argv[2]
    auth = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
            os.environ["AWS_ACCESS_KEY_ID"] + ":" + os.environ["AWS_SECRET_ACCESS_KEY"],
            "-H", "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"]
    token, keys = None, []
    while True:
        q = "list-type=2&prefix=store%2Findex%2F"
        if token:
            q += "&continuation-token=" + urllib.parse.quote(token, safe="")
        x = subprocess.run(["curl", "-sSf", "-m", "30", *auth, f"{ep}/talos-gen?{q}"],
                           capture_output=True, check=True).stdout.decode()
        keys += re.findall(r"<Key>([^<]+)</Key>", x)
        m = re.search(r"<NextContinuationToken>([^<]+)</NextContinuationToken>", x)
        if not m:
            break
        token = m.group(1)
    for k in keys:
        if k.endswith(".json"):
            show(subprocess.run(["curl", "-sSf", "-m", "30", *auth, f"{ep}/talos-gen/{k}"],
                                capture_output=True, check=True).stdout)
PY
}
index_dump s3 > "$W/index-first.s3"
index_dump dir "$LOC" > "$W/index-first.loc"
# The keys config B names: the first sync's pinned keys but nocloud's and
# the sync's own status record.
for st in s3 loc; do
  awk '$3=="pinned" && $1 !~ /nocloud-amd64/ && $1 !~ /^status\// {print $1, $2}' "$W/index-first.$st" | sort > "$W/pins.$st"
  [ -s "$W/pins.$st" ] || { echo "the first sync pinned nothing in $st" >&2; cat "$W/index-first.$st" >&2; exit 1; }
done

echo "# replicas: s3a :${PORT[s3a]} s3b :${PORT[s3b]} (bucket), loc :${PORT[loc]} (tmpfs of $VOL_MIB MiB)"
for n in "${REPLICAS[@]}"; do
  start_replica "$n" || { echo "replica $n did not come up" >&2; tail "$W/$n.log" >&2; exit 1; }
  echo "replica $n http://127.0.0.1:${PORT[$n]}" >> "$W/spec"
done
# Warm: each artifact once through each replica, then the baseline.
for n in "${REPLICAS[@]}"; do
  while read -r kind path _; do
    if [ "$kind" = artifact ]; then curl -s -o /dev/null -m 60 "http://127.0.0.1:${PORT[$n]}$path" || true; fi
  done < "$W/spec"
done
declare -A FD0 RSS0
for n in "${REPLICAS[@]}"; do FD0[$n]=$(fds "$(pid_of "$n")"); RSS0[$n]=$(status_kib "$(pid_of "$n")" RssAnon); done

# --- the fault loops -------------------------------------------------------
END=$(($(date +%s) + DUR))
left() { echo $((END - $(date +%s))); }

kill_loop() {
  set +e; RANDOM=$((SEED + 1))
  local n
  while nap "$(rnd 10 40)"; do
    n=${REPLICAS[$((RANDOM % 3))]}
    kill -9 "$(pid_of "$n")" 2> /dev/null && log_fault "kill $n"
    sleep "$(rnd 1 5)"
    supervise "$n" || log_fault "RESTART-FAILED $n"
  done
}

# readyz NAME: "CODE SECONDS" of one /readyz (000: no answer within 10 s).
readyz() { curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' "http://127.0.0.1:${PORT[$1]}/readyz"; }
get_ok() { [ "$(curl -sf -m 30 "http://127.0.0.1:${PORT[$1]}$PROBE_PATH" | sha256sum | cut -d' ' -f1)" = "$PROBE_SHA" ]; }
# back NAME: the replica answers /readyz 200 and a whole GET right, or is
# not running (a kill of its own; its restart is timed by the kill loop).
back() { ! pid_alive "$(pid_of "$1")" || { [ "$(readyz "$1" | cut -d' ' -f1)" = 200 ] && get_ok "$1"; }; }
freeze_loop() {
  set +e; RANDOM=$((SEED + 2))
  local d t0 t1 n r code took
  while nap "$(rnd 15 40)"; do
    d=$(rnd 5 60)
    [ "$d" -gt $(($(left) - 5)) ] && d=$(($(left) - 5))
    [ "$d" -ge 5 ] || continue
    kill -STOP "$GPID"; t0=$(now)
    # Per bucket replica: when its /readyz first answered non-200 (seconds
    # since the stop, and how long that answer took).
    # (a replica killed and restarted during the freeze is marked: its
    # answer then times its restart, not how fast a running one turns)
    declare -A turned=() pid0=([s3a]="$(pid_of s3a)" [s3b]="$(pid_of s3b)")
    while [ "$(secs "$t0" "$(now)" | cut -d. -f1)" -lt "$d" ]; do
      for n in s3a s3b; do
        [ -n "${turned[$n]:-}" ] && continue
        read -r code took <<< "$(readyz "$n")"
        # (000 at once: not listening, a replica starting after a kill)
        [ "$code" = 000 ] && [ "${took%%.*}" -lt 9 ] && continue
        [ "$code" != 200 ] && turned[$n]="$(secs "$t0" "$(now)")s(${code},took${took%???}s$([ "$(pid_of "$n")" = "${pid0[$n]}" ] || echo ',restarted'))"
      done
      sleep 0.25
    done
    kill -CONT "$GPID"; t1=$(now)
    r=never
    for _ in $(seq 600); do
      back s3a && back s3b && { r=$(secs "$t1" "$(now)"); break; }
      sleep 0.2
    done
    log_fault "freeze ${d}s readyz-turned s3a=${turned[s3a]:-no} s3b=${turned[s3b]:-no} recovered=$r"
    [ "$r" = never ] && log_fault "FREEZE-NOT-RECOVERED"
  done
}

factory_loop() {
  set +e; RANDOM=$((SEED + 3))
  local d
  while nap "$(rnd 10 35)"; do
    d=$(rnd 5 20)
    if [ $((RANDOM % 2)) = 0 ]; then
      kill -TERM "$(cat "$W/pid.nginx")"; wait "$(cat "$W/pid.nginx")" 2> /dev/null
      for _ in $(seq 50); do pid_alive "$(cat "$W/pid.nginx")" || break; sleep 0.1; done
      log_fault "factory-stop ${d}s"
      nap "$d"
      factory_start || log_fault "FACTORY-RESTART-FAILED"
    else
      factory_conf lie; kill -HUP "$(cat "$W/pid.nginx")"
      log_fault "factory-lie ${d}s"
      nap "$d"
      factory_conf good; kill -HUP "$(cat "$W/pid.nginx")"
    fi
  done
}

fill_loop() {
  set +e; RANDOM=$((SEED + 4))
  local avail
  while nap "$(rnd 15 40)"; do
    avail=$(df -B1 --output=avail "$W/vol" | tail -1)
    [ "$avail" -gt $((2 << 20)) ] || continue
    fallocate -l $((avail - (1 << 20))) "$W/vol/filler" && log_fault "fill $(((avail >> 20) - 1)) MiB"
    nap "$(rnd 5 20)"
    rm -f "$W/vol/filler"
  done
}

# mirror_run LABEL COMMAND...: run it (tracked: a stop mid-run ends it
# too; at most 5 minutes a try) until it exits 0, at most 4 tries 10 s
# apart (a CronJob's next run: the factory may be stopped, the volume
# full, the first try killed); one line in the faults log with the exit
# code of each try.
mirror_run() {
  local label=$1 rc p try codes=(); shift
  for try in 1 2 3 4; do
    timeout 300 "$@" >> "$W/mirror.log" 2>&1 &
    p=$!; track "$p"
    # A first try in three is killed (kill -9, a CronJob's pod lost) 0.1-0.9 s in.
    if [ "$try" = 1 ] && [ $((RANDOM % 3)) = 0 ]; then
      sleep "0.$((RANDOM % 9 + 1))"
      c=$(pgrep -P "$p" || true)
      [ -n "$c" ] && kill -9 "$c" 2> /dev/null && log_fault "mirror-kill $label"
    fi
    wait "$p"; rc=$?
    codes+=("$rc")
    [ "$rc" = 0 ] && break
    nap 10 || break
  done
  log_fault "$label exit=$(IFS=,; echo "${codes[*]}")"
}
# The mirror job, over and over (its first run at a sixth of the run, then
# every 20-50 s): sync --prune with config B; an export/import cycle (the
# local store into the bucket, the bucket into the local store); sync with
# config A again (nocloud pinned again, for the next prune to drop).
mirror_loop() {
  set +e; RANDOM=$((SEED + 5))
  local i=0 at
  nap $((DUR / 6)) || return 0
  while true; do
    case $((i % 3)) in
      0)
        mirror_run "mirror-sync-prune s3" "$BIN" mirror sync --prune --config "$W/mirror-b.yaml" "${MIRROR[@]}" "${S3[@]}" --cache-dir "$W/spool"
        mirror_run "mirror-sync-prune loc" "$BIN" mirror sync --prune --config "$W/mirror-b.yaml" "${MIRROR[@]}" --cache-dir "$LOC" ;;
      1)
        rm -f "$W"/export-*.tar
        mirror_run "mirror-export loc" "$BIN" mirror export --config "$W/mirror-b.yaml" --cache-dir "$LOC" --output "$W/export-loc.tar"
        mirror_run "mirror-import s3" "$BIN" mirror import "$W/export-loc.tar" "${S3[@]}" --cache-dir "$W/spool"
        mirror_run "mirror-export s3" "$BIN" mirror export --config "$W/mirror-b.yaml" "${S3[@]}" --cache-dir "$W/spool" --output "$W/export-s3.tar"
        mirror_run "mirror-import loc" "$BIN" mirror import "$W/export-s3.tar" --cache-dir "$LOC" ;;
      2)
        mirror_run "mirror-sync s3" "$BIN" mirror sync --config "$W/mirror-a.yaml" "${MIRROR[@]}" "${S3[@]}" --cache-dir "$W/spool"
        mirror_run "mirror-sync loc" "$BIN" mirror sync --config "$W/mirror-a.yaml" "${MIRROR[@]}" --cache-dir "$LOC" ;;
    esac
    i=$((i + 1))
    nap "$(rnd 20 50)" || break
  done
}

: > "$W/faults"
echo "# clients and faults for $DUR s"
"$EX/chaos_client" "$W/spec" "$DUR" "$CLIENTS" "$SEED" > "$W/ledger.out" 2> "$W/ledger.err" &
CLIENT=$!
track "$CLIENT"
LOOPS=()
for l in kill_loop freeze_loop factory_loop fill_loop mirror_loop; do
  "$l" & LOOPS+=($!); track $!
done
wait "$CLIENT" || { echo "the client failed:" >&2; tail "$W/ledger.err" >&2; exit 1; }
touch "$W/stop"
for p in "${LOOPS[@]}"; do wait "$p" || true; done

# --- back to a quiet state, then the checks ---------------------------------
kill -CONT "$GPID"
rm -f "$W/vol/filler"
factory_conf good
pid_alive "$(cat "$W/pid.nginx")" && kill -HUP "$(cat "$W/pid.nginx")" || factory_start
for n in "${REPLICAS[@]}"; do
  pid_alive "$(pid_of "$n")" || supervise "$n" || { echo "replica $n did not come back" >&2; exit 1; }
done
FAIL=()
read -r -a LEDGER <<< "$(tail -1 "$W/ledger.out")"
declare -A L
for kv in "${LEDGER[@]:1}"; do L[${kv%%=*}]=${kv#*=}; done
[ "${L[wrong]:-x}" = 0 ] || FAIL+=("wrong answers: ${L[wrong]:-no ledger} (see the WRONG lines above)")
grep -h '^WRONG' "$W/ledger.err" | sed -n 1,20p >&2 || true
grep -qE ' [A-Z-]+-(FAILED|NOT-RECOVERED)' "$W/faults" && FAIL+=("$(grep -hE ' [A-Z-]+-(FAILED|NOT-RECOVERED)' "$W/faults" | tr '\n' ' ')")

echo "# mirror verify of both stores"
for st in s3 loc; do
  if [ "$st" = s3 ]; then at=("${S3[@]}" --cache-dir "$W/spool"); else at=(--cache-dir "$LOC"); fi
  if ! "$BIN" mirror verify "${at[@]}" > "$W/verify.$st" 2>&1 || ! grep -q ' 0 bad, 0 entries dropped' "$W/verify.$st"; then
    FAIL+=("mirror verify $st: $(head -3 "$W/verify.$st" | tr '\n' ' ')")
  fi
done

echo "# keys: the mirrored ones present, pinned, same digest; every one true"
index_dump s3 > "$W/index-last.s3"
index_dump dir "$LOC" > "$W/index-last.loc"
KEYS_BAD=0
for st in s3 loc; do
  while read -r k d; do
    got=$(awk -v k="$k" '$1==k{print $2, $3}' "$W/index-last.$st")
    if [ "$got" != "$d pinned" ]; then
      KEYS_BAD=$((KEYS_BAD + 1))
      FAIL+=("$st: key $k: ${got:-absent}, expected $d pinned")
    fi
  done < "$W/pins.$st"
done

# Every key either store holds, pinned or cached, maps to the true bytes:
# an artifact's key to its file's sha256, a blob's or manifest's to its
# own digest, a tag's to the index pushed.
{
  while read -r kind path f; do
    [ "$kind" = artifact ] && echo "${path#/} $(sha256sum "$f" | cut -d' ' -f1)"
  done < "$W/spec"
  echo "oci/tag/ns=ghcr.io/chaos/app:v1 $APP_INDEX"
  echo "oci/tag/ns=ghcr.io/chaos/tool:v2 $TOOL_INDEX"
} > "$W/truth"
for st in s3 loc; do
  while read -r k want got; do
    KEYS_BAD=$((KEYS_BAD + 1))
    FAIL+=("$st: key $k maps to $got, the true bytes are $want")
  done < <(awk 'NR==FNR {t[$1]=$2; next}
    { w = t[$1]; if (w == "" && $1 ~ /^oci\/(blob|manifest)\/sha256:/) { w = $1; sub(/.*sha256:/, "", w) } }
    w != "" && w != $2 { print $1, w, $2 }' "$W/truth" "$W/index-last.$st")
done

echo "# bounds, descriptors, memory (settling at most 30 s)"
held() { local b; b=$(du -sb "$1" 2> /dev/null | cut -f1); echo "${b:-0}"; } # dir -> bytes
declare -A OBJS
for n in "${REPLICAS[@]}"; do
  if [ "$n" = loc ]; then OBJS[$n]=$(find "$LOC/objects" -type f | wc -l); else OBJS[$n]=$(find "$W/$n/tier" -type f 2> /dev/null | wc -l); fi
  [ "${OBJS[$n]}" -le 128 ] || OBJS[$n]=128
done
settled=
for _ in $(seq 60); do
  bad=()
  for n in s3a s3b; do [ "$(held "$W/$n/tier")" -le "$TIER_MAX" ] || bad+=("$n tier $(held "$W/$n/tier") > $TIER_MAX"); done
  [ "$(held "$LOC/objects")" -le "$LOC_MAX" ] || bad+=("loc store $(held "$LOC/objects") > $LOC_MAX")
  for n in "${REPLICAS[@]}"; do
    p=$(pid_of "$n"); f=$(fds "$p"); r=$(status_kib "$p" RssAnon)
    # (a store keeps the files of up to 128 idle objects open: one per
    # object the store holds, beyond the start's, is no leak)
    [ "$f" -le $((FD0[$n] + 16 + OBJS[$n])) ] || bad+=("$n descriptors $f (start ${FD0[$n]}, objects held ${OBJS[$n]})")
    [ "$r" -le $((RSS0[$n] + 32768)) ] || bad+=("$n RssAnon ${r} KiB (start ${RSS0[$n]} KiB)")
  done
  ((${#bad[@]})) || { settled=1; break; }
  sleep 0.5
done
[ -n "$settled" ] || FAIL+=("${bad[@]}")
# Temp files the stores hold once quiet (a fill, an index write or a
# spool file left behind by a failed write).
(cd "$W" && find vol/store s3a s3b spool -type f -printf '%s %p\n' > "$W/files" 2> /dev/null) || true
TEMPS=$(grep -cE ' (vol/store|s3a|s3b|spool)/(tmp|spool)/' "$W/files" || true)
[ "$TEMPS" = 0 ] || FAIL+=("$TEMPS temp files left in the stores: $(grep -E ' (vol/store|s3a|s3b|spool)/(tmp|spool)/' "$W/files" | sed -n 1,3p | tr '\n' ' ')")
for n in "${REPLICAS[@]}"; do ls -l "/proc/$(pid_of "$n")/fd" > "$W/fds.$n.log" 2>&1 || true; done
FDR=$(for n in "${REPLICAS[@]}"; do printf '%s:%s/%s,%s/%sKiB ' "$n" "${FD0[$n]}" "$(fds "$(pid_of "$n")")" "${RSS0[$n]}" "$(status_kib "$(pid_of "$n")" RssAnon)"; done)

# --- stop everything, then look for leftovers -------------------------------
mapfile -t ALL < "$W/.pids"
for p in "${ALL[@]}"; do { kill -TERM "$p"; kill -CONT "$p"; } 2> /dev/null || true; done
for _ in $(seq 100); do
  alive=0; for p in "${ALL[@]}"; do pid_alive "$p" && alive=1; done
  [ $alive = 0 ] && break; sleep 0.1
done
for p in "${ALL[@]}"; do kill -KILL "$p" 2> /dev/null || true; done
wait 2> /dev/null || true
umount "$W/vol" || FAIL+=("the tmpfs would not unmount")
LEFT=$(pgrep -f -- "$W" | grep -vx "$$" | wc -l || true)
[ "$LEFT" = 0 ] || FAIL+=("$LEFT processes left: $(pgrep -af -- "$W" | sed -n 1,3p | tr '\n' ';')")

count() { grep -c "$1" "$W/faults" || true; }
RECOV=$(awk '/ freeze /{sub(/.*recovered=/,""); printf "%s%s", s, $1; s=","}' "$W/faults")
TURN=$(awk '/ freeze /{for(i=1;i<=NF;i++) if($i ~ /^s3[ab]=/){sub(/^s3[ab]=/,"",$i); printf "%s%s", s, $i; s=","}}' "$W/faults")
echo "# faults injected:"; sed 's/^/  /' "$W/faults"
echo "# replicas (descriptors start/end, RssAnon start/end): $FDR"
for f in "${FAIL[@]}"; do echo "FAIL: $f" >&2; done
RESULT=PASS; ((${#FAIL[@]})) && RESULT=FAIL
echo "CHAOS $RESULT minutes=$MINUTES seed=$SEED answers=${L[answers]:-0} ok=${L[ok]:-0} cuts=${L[cuts]:-0} wrong=${L[wrong]:-?} timeouts=${L[timeouts]:-?} ranges=${L[ranges]:-0} pulls_blobs=${L[blobs]:-0} kills=$(count ' kill ') freezes=$(count ' freeze ') factory_stops=$(count factory-stop) factory_lies=$(count factory-lie) fills=$(count ' fill ') syncs=$(count "mirror-sync ") prunes=$(count mirror-sync-prune) export_imports=$(count mirror-import) mirror_kills=$(count mirror-kill) keys_bad=$KEYS_BAD temp_files=$TEMPS leftovers=$LEFT probe_max_ms=healthz:${L[healthz_max_ms]:-?},readyz:${L[readyz_max_ms]:-?} readyz_turned_s=${TURN:-none} freeze_recovery_s=${RECOV:-none} load=$(cut -d' ' -f1 /proc/loadavg)"
[ "$RESULT" = PASS ] || exit 1
