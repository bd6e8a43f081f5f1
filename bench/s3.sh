#!/usr/bin/env bash
# Benchmark of the S3 store backend, side by side, in one run, on loopback,
# against a one-node Garage (replication factor 1: the bench measures
# talos-gen, not Garage's replication):
#   1. cached serving, side by side: whole GETs of a stored artifact through
#      talos-gen from the bucket (a replica with `--local-cache-max-size 0`:
#      one GET per response, every 64 KiB block checked before it goes out)
#      and from its local tier (the default `--local-cache-max-size`: the
#      copy on --cache-dir, checked the same), vs a direct ranged GET
#      (`-r 0-`) of the same object from Garage (curl --aws-sigv4), and
#      vs that GET through nginx proxy_pass (the proxy a user would put
#      before a bucket, 256 KiB buffers; it checks nothing); the three ways
#      to the bucket interleaved GET by GET, S3_ROUNDS rounds (default 7),
#      best and median of each, and the CPU per GiB of every process
#      (S3_PROFILE=SECS: a `perf record` profile of the bucket replica,
#      kept at S3_PERF_OUT when set); where HAProxy is installed, a fourth
#      way: HAProxy before Garage with `option splice-response` (the body
#      moved socket to pipe to socket in the kernel, no copy through user
#      space, nothing checked: the cheapest proxy hop there is);
#      S3_TLS=1: the bucket reached over HTTPS instead (nginx, 2 workers,
#      terminating TLS before Garage, its CA from `talos-gen mirror cert`),
#      the direct GET and the bucket replica both through it, the two
#      proxies left out;
#   2. a cold burst of 16 clients spread over two replicas on one bucket,
#      behind a rate-limited upstream (nginx limit_rate), vs one plain
#      download from that upstream; upstream transfers counted;
#   3. anonymous memory (RssAnon, peak of 10 samples a second) per replica
#      during the burst (the bound: under 64 MiB).
# Prints ratios. Needs: garage (cargo install garage), nginx, curl, xz (and
# haproxy for the fourth way, skipped without it); a
# release build (cargo build --release; TALOS_GEN_BIN for another binary).
# TALOS_GEN_S3_GET=object_store (exported), with a binary built with the
# bench-only feature (cargo build --release --features bench-object-store-get;
# TALOS_GEN_BIN names it): the replicas read the bucket through
# object_store's own streaming GET instead of the span client, the
# comparison that client has to win (run both, alternated). A shipped build
# ignores the variable: it has one S3 GET path.
# Usage: bench/s3.sh [SIZE_MIB] [RATE]   (defaults 64, 25m)
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): each background process is tracked by PID and stopped by
# bench/lib.sh's trap on EXIT.
set -euo pipefail

SIZE_MIB=${1:-64}
RATE=${2:-25m}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TALOS_GEN_BIN:-$HERE/target/release/talos-gen}
GARAGE=${GARAGE:-$(command -v garage || echo "$HOME/.cargo/bin/garage")}
. "$HERE/bench/lib.sh"
need_tools nginx curl xz "$GARAGE"
if [ "${TALOS_GEN_S3_GET:-}" = object_store ] && ! grep -q TALOS_GEN_S3_GET "$BIN"; then
  echo "TALOS_GEN_S3_GET=object_store needs a build with --features bench-object-store-get ($BIN has none)" >&2
  exit 2
fi
need_bin
W=$WORK

factory_artifact "$SIZE_MIB"

SHA=$(sha256sum "$W/root$P" | cut -d' ' -f1)

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
track $!
GPID=$!
for _ in $(seq 200); do g node id -q >/dev/null 2>&1 && break; sleep 0.1; done
ID=$(g node id -q | cut -d@ -f1)
g layout assign -z z0 -c 1G "$ID" >/dev/null
g layout apply --version 1 >/dev/null
for _ in $(seq 100); do g bucket create talos-gen >/dev/null 2>&1 && break; sleep 0.2; done
KEY=$(g key create bench)
export AWS_ACCESS_KEY_ID=$(awk '/Key ID:/{print $3}' <<<"$KEY")
export AWS_SECRET_ACCESS_KEY=$(awk '/Secret key:/{print $3}' <<<"$KEY")
g bucket allow --read --write --owner talos-gen --key bench >/dev/null
EP=http://127.0.0.1:$GS
# S3_TLS=1: the bucket replica and the direct GET reach Garage over HTTPS.
TLS=${S3_TLS:-}
if [ -n "$TLS" ]; then
  echo "# nginx terminating TLS before Garage"
  "$BIN" mirror cert --output-dir "$W/tls/certs" --name 127.0.0.1 > /dev/null
  TP=$(free_port)
  nginx_start "$W/tls" 2 <<EOF
  access_log off;
  upstream garage { server 127.0.0.1:$GS; keepalive 8; }
  server {
    listen 127.0.0.1:$TP ssl;
    ssl_certificate $W/tls/certs/tls.crt;
    ssl_certificate_key $W/tls/certs/tls.key;
    client_max_body_size 0;
    location / {
      proxy_pass http://garage;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_request_buffering off;
      proxy_buffer_size 256k;
      proxy_buffers 8 256k;
      proxy_busy_buffers_size 512k;
      proxy_max_temp_file_size 0;
    }
  }
EOF
  TLSPID=$NGINX_PID
  for _ in $(seq 100); do curl -s -o /dev/null --cacert "$W/tls/certs/ca.crt" "https://127.0.0.1:$TP/" && break; sleep 0.05; done
fi

echo "# nginx as the factory (limit_rate $RATE)"
NP=$(free_port)
nginx_start "$W/nginx" 1 <<EOF
  access_log $W/nginx/access.log;
  server { listen 127.0.0.1:$NP; root $W/root; limit_rate $RATE; }
EOF
wait_http "http://127.0.0.1:$NP/"

replica() { # name [serve flags...] -> port
  local port name=$1; shift; port=$(free_port)
  mkdir -p "$W/$name"
  "$BIN" serve --listen "127.0.0.1:$port" --cache-dir "$W/$name" \
    --factory-url "http://127.0.0.1:$NP" --store s3://talos-gen/store --s3-endpoint "$EP" \
    "$@" > "$W/$name.log" 2>&1 &
  track $!
  eval "PID_$name=$!"
  wait_http "http://127.0.0.1:$port/healthz"
  echo "$port"
}
R1=$(replica one); R2=$(replica two)
PID1=$(pgrep -f -- "--cache-dir $W/one" | head -1); PID2=$(pgrep -f -- "--cache-dir $W/two" | head -1)

secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", b-a}'; }
now() { date +%s.%N; }

echo "# cold: one plain download from the upstream"
t0=$(now); curl -sf -o /dev/null "http://127.0.0.1:$NP$P"; t1=$(now)
PLAIN=$(secs "$t0" "$t1")
: > "$W/nginx/access.log"

echo "# cold: 16 clients over two replicas"
peak() { local p=$1 m=0 v; while kill -0 "$p" 2>/dev/null && [ ! -e "$W/done" ]; do
  v=$(status_kib "$p" RssAnon); [ "${v:-0}" -gt "$m" ] && m=$v; sleep 0.1; done; echo "$m"; }
peak "$PID1" > "$W/peak1" & MON1=$!
peak "$PID2" > "$W/peak2" & MON2=$!
t0=$(now)
CL=()
for i in $(seq 16); do
  port=$R1; [ $((i % 2)) -eq 0 ] && port=$R2
  curl -sf -o "$W/c$i" "http://127.0.0.1:$port$P" & CL+=($!)
done
for p in "${CL[@]}"; do wait "$p"; done
t1=$(now)
touch "$W/done"; wait $MON1 $MON2
BURST=$(secs "$t0" "$t1")
for i in $(seq 16); do [ "$(sha256sum < "$W/c$i" | cut -d' ' -f1)" = "$SHA" ] || { echo "client $i: wrong bytes" >&2; exit 1; }; done
TRANSFERS=$(grep -c "GET $P" "$W/nginx/access.log" || true)
rm -f "$W"/c*

# SigV4's payload hash of an empty body (every GET and HEAD here).
EMPTY_SHA=$(printf '' | sha256sum | cut -d' ' -f1)
echo "# cached: whole GETs through talos-gen, through nginx proxy_pass and direct from Garage, interleaved"
for _ in $(seq 100); do  # the commit follows the last byte
  curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: $EMPTY_SHA" \
    -I "$EP/talos-gen/store/objects/sha256/$SHA" | grep -q 200 && break; sleep 0.1
done
# CPU time (clock ticks, user + system) of processes, and of this shell's
# children (the curls) once they are waited for.
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{sub(/^.*\) /,""); print $12+$13}' "/proc/$p/stat"))); done; echo "$t"; }
HZ=$(getconf CLK_TCK)
# KIDS: ticks of the waited-for children (`times` in this shell, not a subshell).
kids() { times > "$W/times"; KIDS=$(awk -v hz="$HZ" 'NR==2{for(i=1;i<=2;i++){split($i,a,/[ms]/); t+=a[1]*60+a[2]}; printf "%d", t*hz}' "$W/times"); }
# From the bucket: a replica without the local tier.
if [ -n "$TLS" ]; then
  R3=$(EP=https://127.0.0.1:$TP SSL_CERT_FILE=$W/tls/certs/ca.crt replica bucket --local-cache-max-size 0)
else
  R3=$(replica bucket --local-cache-max-size 0)
fi
PID3=$(pgrep -f -- "--cache-dir $W/bucket" | head -1)
track "$PID3"  # started in a subshell: tracked by PID
curl -sf -o /dev/null "http://127.0.0.1:$R3$P"  # its checksums in memory, a connection open
# From the local tier: replica two, once its copy is there (its own fill,
# or the copy after its first read from the bucket).
curl -sf -o /dev/null "http://127.0.0.1:$R2$P"
for _ in $(seq 300); do [ -e "$W/two/tier/$SHA" ] && break; sleep 0.1; done
[ -e "$W/two/tier/$SHA" ] || { echo "replica two's local tier holds no copy" >&2; exit 1; }
TT=$(for _ in 1 2 3 4 5; do curl -sf -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$R2$P"; done | sort -n | head -1)
# The peer a user would put in front of a bucket: nginx proxy_pass (2
# workers, upstream keepalive, 256 KiB buffers, no temp file: the fastest of
# the configurations tried, proxy_buffering off with 4 KiB buffers was 0.6-0.7x
# a direct GET; it checks nothing), the
# same ranged GET signed once by curl and replayed (SigV4 holds 15 minutes;
# nginx signs nothing itself).
SIGNED=$(curl -sv -o /dev/null -r 0- --aws-sigv4 aws:amz:us-east-1:s3 \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
  -H "x-amz-content-sha256: $EMPTY_SHA" \
  "$EP/talos-gen/store/objects/sha256/$SHA" 2>&1 | tr -d '\r')
AUTH=$(sed -n 's/^> [Aa]uthorization: //p' <<<"$SIGNED")
XDATE=$(sed -n 's/^> [Xx]-[Aa]mz-[Dd]ate: //p' <<<"$SIGNED")
PP=$(free_port)
nginx_start "$W/proxy" 2 <<EOF
  access_log off;
  upstream garage { server 127.0.0.1:$GS; keepalive 8; }
  server {
    listen 127.0.0.1:$PP;
    location = / {
      proxy_pass http://garage/talos-gen/store/objects/sha256/$SHA;
      proxy_http_version 1.1;
      proxy_buffering on;
      proxy_buffer_size 256k;
      proxy_buffers 8 256k;
      proxy_busy_buffers_size 512k;
      proxy_max_temp_file_size 0;
      proxy_set_header Connection "";
      proxy_set_header Host 127.0.0.1:$GS;
      proxy_set_header Range "bytes=0-";
      proxy_set_header Authorization "$AUTH";
      proxy_set_header x-amz-date "$XDATE";
      proxy_set_header x-amz-content-sha256 "$EMPTY_SHA";
    }
  }
EOF
PXPID=$NGINX_PID
wait_http "http://127.0.0.1:$PP/"
[ "$(curl -sf "http://127.0.0.1:$PP/" | sha256sum | cut -d' ' -f1)" = "$SHA" ] || { echo "nginx proxy_pass to Garage: wrong bytes" >&2; exit 1; }
PXW=$(pgrep -P "$PXPID" | tr '\n' ' ')
# The cheapest hop there is, where installed: HAProxy (2 threads, as nginx
# has 2 workers) with the response spliced in the kernel, the same signed
# GET replayed.
WAYS=(direct proxy bucket)
HAPID=
[ -n "$TLS" ] && WAYS=(direct bucket)
if [ -z "$TLS" ] && command -v haproxy > /dev/null; then
  HP=$(free_port)
  mkdir -p "$W/haproxy"
  cat > "$W/haproxy/haproxy.cfg" <<EOF
global
  nbthread 2
  tune.bufsize 262144
  tune.pipesize 1048576
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option splice-response
frontend f
  bind 127.0.0.1:$HP
  default_backend garage
backend garage
  http-request set-path /talos-gen/store/objects/sha256/$SHA
  http-request set-header Host 127.0.0.1:$GS
  http-request set-header Range bytes=0-
  http-request set-header Authorization "$AUTH"
  http-request set-header x-amz-date $XDATE
  http-request set-header x-amz-content-sha256 $EMPTY_SHA
  server garage 127.0.0.1:$GS
EOF
  haproxy -db -f "$W/haproxy/haproxy.cfg" > "$W/haproxy/log" 2>&1 &
  track $!
  HAPID=$!
  wait_http "http://127.0.0.1:$HP/"
  [ "$(curl -sf "http://127.0.0.1:$HP/" | sha256sum | cut -d' ' -f1)" = "$SHA" ] || { echo "HAProxy before Garage: wrong bytes" >&2; exit 1; }
  WAYS+=(splice)
fi
# The three ways to the bucket's object, interleaved GET by GET for ROUNDS
# rounds (S3_ROUNDS, default 7): the machine's noise, which moves even the
# direct GET by 2x within a run, falls on the three alike. Per GET: its
# time, and the CPU ticks of Garage, of the proxy in between (none for the
# direct GET) and of curl.
get_direct() {
  local ep=$EP tls=()
  [ -n "$TLS" ] && { ep=https://127.0.0.1:$TP; tls=(--cacert "$W/tls/certs/ca.crt"); }
  curl -sf -o /dev/null -w '%{time_total}' -r 0- --aws-sigv4 aws:amz:us-east-1:s3 \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "${tls[@]}" \
    -H "x-amz-content-sha256: $EMPTY_SHA" "$ep/talos-gen/store/objects/sha256/$SHA"
}
get_proxy() { curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PP/"; }
get_bucket() { curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$R3$P"; }
get_splice() { curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$HP/"; }
ROUNDS=${S3_ROUNDS:-7}
# The bucket's side: Garage, and over HTTPS the TLS front's processes too.
GSIDE=("$GPID")
[ -n "$TLS" ] && read -r -a GSIDE <<<"$GPID $TLSPID $(pgrep -P "$TLSPID" | tr '\n' ' ')"
: > "$W/gets"
for _ in $(seq "$ROUNDS"); do
  for way in "${WAYS[@]}"; do
    case $way in
      direct) procs=() ;;
      proxy) read -r -a procs <<<"$PXPID $PXW" ;;
      bucket) procs=("$PID3") ;;
      splice) procs=("$HAPID") ;;
    esac
    g0=$(ticks "${GSIDE[@]}"); x0=$(ticks "${procs[@]}"); kids; k0=$KIDS
    t=$(get_$way)
    g1=$(ticks "${GSIDE[@]}"); x1=$(ticks "${procs[@]}"); kids; k1=$KIDS
    echo "$way $t $((g1 - g0)) $((x1 - x0)) $((k1 - k0))" >> "$W/gets"
  done
done
# best WAY / median WAY: seconds a GET; cpu WAY FIELD: ms of CPU per GiB.
best() { awk -v w="$1" '$1==w{print $2}' "$W/gets" | sort -n | head -1; }
median() { awk -v w="$1" '$1==w{print $2}' "$W/gets" | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
cpu() { awk -v w="$1" -v f="$2" -v hz="$HZ" -v n="$LEN" '$1==w{t+=$f; k++} END{printf "%.0f", t*1000/hz/(k*n/1073741824)}' "$W/gets"; }
# S3_PROFILE=SECS: where talos-gen's time goes from the bucket, `perf
# record` of the bucket replica during SECS seconds of GETs (needs perf).
if [ -n "${S3_PROFILE:-}" ]; then
  echo "# profile: perf record of the bucket replica during $S3_PROFILE s of GETs"
  ( end=$((SECONDS + S3_PROFILE)); while [ "$SECONDS" -lt "$end" ]; do get_bucket > /dev/null; done ) &
  LOOP=$!
  perf record -F 1999 -g -o "${S3_PERF_OUT:-$W/perf.data}" -p "$PID3" -- sleep "$S3_PROFILE" > /dev/null 2>&1 \
    || echo "perf record failed (is perf installed, perf_event_paranoid low enough?)" >&2
  wait "$LOOP"
  { echo "profile of the bucket replica, by symbol (self):"
    perf report -i "$W/perf.data" --no-children --sort symbol --stdio 2> /dev/null | awk '/^ +[0-9.]+%/ && n++ < 20 { sub(/[ \t-]+$/, ""); print }'
    echo "by thread:"
    perf report -i "$W/perf.data" --no-children --sort comm --stdio 2> /dev/null | awk '/^ +[0-9.]+%/ && n++ < 8 { sub(/[ \t-]+$/, ""); print }'
  } > "$W/profile"
fi
GA=$(best direct); PX=$(best proxy); TG=$(best bucket)
GAM=$(median direct); PXM=$(median proxy); TGM=$(median bucket)
CPU_DIRECT="garage $(cpu direct 3), curl $(cpu direct 5)"
CPU_PROXY="garage $(cpu proxy 3), nginx $(cpu proxy 4), curl $(cpu proxy 5)"
CPU_BUCKET="garage $(cpu bucket 3), talos-gen $(cpu bucket 4), curl $(cpu bucket 5)"

echo
echo "artifact $LEN bytes; upstream limit_rate $RATE"
awk -v tg="$TG" -v tt="$TT" -v ga="$GA" -v n="$LEN" 'BEGIN{printf "cached: direct ranged GET from Garage %.1f MiB/s; talos-gen from the bucket %.1f MiB/s (ratio %.3f, must be >= 0.9); from the local tier %.1f MiB/s (ratio %.3f, must be >= 1.0)\n", n/ga/1048576, n/tg/1048576, ga/tg, n/tt/1048576, ga/tt}'
awk -v b="$BURST" -v p="$PLAIN" -v t="$TRANSFERS" 'BEGIN{printf "cold burst: 16 clients over 2 replicas done in %.3fs, one plain download %.3fs, ratio %.3f; upstream transfers %d (at most one per replica)\n", b, p, b/p, t}'
echo "memory during the burst: RssAnon peak replica one $(cat "$W/peak1") KiB, replica two $(cat "$W/peak2") KiB (bound 65536 KiB)"
if [ -n "$TLS" ]; then
  echo "over HTTPS: the direct GET and the bucket replica both through nginx terminating TLS before Garage (garage = Garage and the TLS front); the proxies not measured"
  echo "CPU ms per GiB served: direct GET ($CPU_DIRECT); from the bucket ($CPU_BUCKET)"
  awk -v tg="$TGM" -v ga="$GAM" 'BEGIN{printf "medians: from the bucket %.3fx a direct GET\n", ga/tg}'
else
  awk -v tg="$TG" -v px="$PX" -v ga="$GA" -v n="$LEN" 'BEGIN{printf "peer: nginx proxy_pass before Garage %.1f MiB/s (%.3fx a direct GET); talos-gen from the bucket %.3fx nginx proxy_pass\n", n/px/1048576, ga/px, px/tg}'
  echo "CPU ms per GiB served: direct GET ($CPU_DIRECT); nginx proxy_pass ($CPU_PROXY); from the bucket ($CPU_BUCKET)"
  if [ -n "$HAPID" ]; then
    awk -v h="$(best splice)" -v hm="$(median splice)" -v ga="$GA" -v gam="$GAM" -v tg="$TG" -v tgm="$TGM" 'BEGIN{printf "peer: HAProxy splice before Garage %.3fx a direct GET (median %.3fx); talos-gen from the bucket %.3fx HAProxy splice (median %.3fx)\n", ga/h, gam/hm, h/tg, hm/tgm}'
    echo "CPU ms per GiB served: HAProxy splice (garage $(cpu splice 3), haproxy $(cpu splice 4), curl $(cpu splice 5))"
  else
    echo "peer: HAProxy splice not measured (haproxy not installed)"
  fi
  awk -v tg="$TGM" -v px="$PXM" -v ga="$GAM" 'BEGIN{printf "medians: from the bucket %.3fx a direct GET, nginx proxy_pass %.3fx, talos-gen %.3fx nginx proxy_pass\n", ga/tg, ga/px, px/tg}'
fi
echo "times (s), GET by GET in the order taken:"
awk -v n="${#WAYS[@]}" '{printf "  %s %s", $1, $2} NR%n==0{print ""}' "$W/gets"
[ -s "$W/profile" ] && cat "$W/profile"
awk -v tg="$TG" -v tt="$TT" -v ga="$GA" -v m1="$(cat "$W/peak1")" -v m2="$(cat "$W/peak2")" 'BEGIN{
  ok = ga/tg >= 0.9 && ga/tt >= 1.0 && m1 < 65536 && m2 < 65536
  printf "%s: from the bucket %.3fx (bar 0.9x), from the local tier %.3fx (bar 1.0x), burst RssAnon under 64 MiB: %s\n", ok ? "PASS" : "FAIL", ga/tg, ga/tt, (m1 < 65536 && m2 < 65536) ? "yes" : "no"}'
