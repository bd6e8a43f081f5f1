#!/usr/bin/env bash
# Benchmark of the /image cache, side by side with the peers a user would pick,
# in one run, on loopback:
#   1. cached artifact throughput: wrk (8, 64 and 256 connections; whole GETs and
#      random 1 MiB ranges) against talos-gen serving a stored artifact (every
#      chunk checked against its checksum) vs nginx serving the same file
#      with sendfile;
#   2. 16 cold clients behind a rate-limited upstream (nginx limit_rate):
#      time to first byte and completion of each client vs one plain upstream
#      download, for talos-gen and for nginx proxy_cache + proxy_cache_lock;
#   3. peak RSS (VmHWM) of talos-gen during the cold run.
# Prints ratios. Needs: nginx (nginx-light), wrk, curl, xz; a release build
# (cargo build --release). Usage: bench/image.sh [SIZE_MIB] [RATE]
# Old against new: TALOS_GEN_OLD_BIN=<another build's binary> runs it as a
# third server in part 1, alternated with nginx and this build round by round
# (nginx, new, old), and prints its CPU per GiB and its ratios beside the
# new one's (new/old per case). E.g. an older commit's release build:
#   git worktree add /tmp/old f1d6411 && (cd /tmp/old && cargo build --release)
#   TALOS_GEN_OLD_BIN=/tmp/old/target/release/talos-gen ROUNDS=3 bench/image.sh 64
#   SIZE_MIB  artifact size (default 100)   RATE  upstream limit_rate (default 25m)
# PARTS=1 runs part 1 only (throughput and CPU per GiB) and stops.
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): each background process is tracked by PID and stopped by
# bench/lib.sh's trap on EXIT.
set -euo pipefail

SIZE_MIB=${1:-100}
RATE=${2:-25m}
DURATION=${DURATION:-10}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TALOS_GEN_BIN:-$HERE/target/release/talos-gen}
. "$HERE/bench/lib.sh"
need_tools nginx wrk curl xz
need_bin
W=$WORK

factory_artifact "$SIZE_MIB"

wait_port() { wait_http "http://127.0.0.1:$1/"; }


# nginx instance: name port extra-server-directives [extra-http]
start_nginx() {
  local name=$1 port=$2 server=$3 http=${4:-}
  mkdir -p "$W/$name"
  cat > "$W/$name/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
user root;
error_log $W/$name/error.log;
pid $W/$name/nginx.pid;
events { worker_connections 1024; }
http {
  access_log $W/$name/access.log;
  client_body_temp_path $W/$name/body;
  proxy_temp_path $W/$name/proxy;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  types { application/x-xz xz; }
  default_type application/octet-stream;
  $http
  server {
    listen 127.0.0.1:$port;
    $server
  }
}
EOF
  nginx -c "$W/$name/nginx.conf" -p "$W/$name" &
  track $!
  wait_port "$port"
}

NG_FILE=$(free_port); start_nginx file "$NG_FILE" "root $W/root;"
NG_UP=$(free_port);   start_nginx up "$NG_UP" "root $W/root; limit_rate $RATE;"
NG_FAST=$(free_port); start_nginx fast "$NG_FAST" "root $W/root;"
NG_PC=$(free_port)
start_nginx pcache "$NG_PC" "location / { proxy_pass http://127.0.0.1:$NG_UP; proxy_cache img; proxy_cache_lock on; proxy_cache_lock_timeout 10m; proxy_cache_lock_age 10m; proxy_cache_valid 200 1h; }" \
  "proxy_cache_path $W/pcache/cache levels=1:2 keys_zone=img:10m max_size=10g inactive=60m use_temp_path=off;"

OLD_BIN=${TALOS_GEN_OLD_BIN:-}
[ -z "$OLD_BIN" ] || [ -x "$OLD_BIN" ] || { echo "TALOS_GEN_OLD_BIN=$OLD_BIN is not an executable" >&2; exit 2; }
SVC_PID=
start_svc() { # cache-dir upstream-port [binary]
  SVC=$(free_port)
  RUST_LOG=warn "${3:-$BIN}" serve --listen 127.0.0.1:$SVC --cache-dir "$1" --factory-url "http://127.0.0.1:$2" 2>"$W/svc.log" &
  SVC_PID=$!
  track "$SVC_PID"
  for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$SVC/healthz" && break; sleep 0.05; done
}
stop_svc() { kill "$SVC_PID" 2>/dev/null || true; wait "$SVC_PID" 2>/dev/null || true; }

to_bytes() { # wrk's "1.23GB" -> bytes
  awk -v v="$1" 'BEGIN{ n=v+0; u=v; sub(/^[0-9.]+/,"",u);
    m=1; if(u=="KB")m=1024; if(u=="MB")m=1048576; if(u=="GB")m=1073741824; printf "%.0f", n*m }'
}
wrk_rate() { # connections url [lua script] -> bytes/s
  local c=$1 url=$2 script=${3:-} t
  t=$(wrk -c"$c" -t2 -d"${DURATION}s" ${script:+-s "$script"} "$url" | awk '/Transfer\/sec/{print $2}')
  to_bytes "$t"
}

# Random 1 MiB ranges (unaligned, as a resuming client asks), the same
# sequence for both servers.
cat > "$W/range.lua" <<LUA
math.randomseed(7)
request = function()
  local off = math.random(0, $LEN - 1048577)
  return wrk.format("GET", nil, { ["Range"] = "bytes=" .. off .. "-" .. (off + 1048575) })
end
LUA

echo "# 1. cached throughput (wrk -t2 -d${DURATION}s; whole ${LEN}-byte GETs and random 1 MiB ranges; 8, 64 and 256 connections; chunk checksums checked on every read)"
start_svc "$W/cache-warm" "$NG_FAST"
curl -sf -o /dev/null "http://127.0.0.1:$SVC$P"          # fill
sleep 0.5
curl -sf -o /dev/null "http://127.0.0.1:$SVC$P"          # warm page cache
curl -sf -o /dev/null "http://127.0.0.1:$NG_FILE$P"
NEW_SVC=$SVC NEW_PID=$SVC_PID
OLD_SVC= OLD_PID=
if [ -n "$OLD_BIN" ]; then
  start_svc "$W/cache-warm-old" "$NG_FAST" "$OLD_BIN"
  OLD_SVC=$SVC OLD_PID=$SVC_PID
  curl -sf -o /dev/null "http://127.0.0.1:$OLD_SVC$P"; sleep 0.5
  curl -sf -o /dev/null "http://127.0.0.1:$OLD_SVC$P"
  SVC=$NEW_SVC SVC_PID=$NEW_PID
fi
# Alternate the two servers ROUNDS times per case; the other builds sharing
# this machine make single runs noisy, so report the best and the mean.
ROUNDS=${ROUNDS:-3}
# CPU time (clock ticks, user + system) of the serving processes during each
# wrk run: nginx's master and workers, talos-gen's one process.
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{sub(/^.*\) /,""); print $12+$13}' "/proc/$p/stat"))); done; echo "$t"; }
# (nginx's workers retitle themselves: found as the master's children.)
NG_FILE_MASTER=$(pgrep -f "$W/file/nginx.conf" | head -n1)
NG_FILE_PIDS="$NG_FILE_MASTER $(pgrep -P "$NG_FILE_MASTER" | tr '\n' ' ')"
run_case() { # label connections url script pids... -> "label rate ticks" in $W/tp
  local label=$1 c=$2 url=$3 script=$4 t0 rate; shift 4
  t0=$(ticks "$@"); rate=$(wrk_rate "$c" "$url" "$script")
  echo "$label $rate $(( $(ticks "$@") - t0 ))" >> "$W/tp"
}
: > "$W/tp"
for mode in whole range1m; do
  script=""; [ "$mode" = range1m ] && script="$W/range.lua"
  for c in ${CONNECTIONS:-8 64 256}; do
    for r in $(seq "$ROUNDS"); do
      # shellcheck disable=SC2086
      run_case "$mode-c$c nginx" "$c" "http://127.0.0.1:$NG_FILE$P" "$script" $NG_FILE_PIDS
      run_case "$mode-c$c ours" "$c" "http://127.0.0.1:$NEW_SVC$P" "$script" "$NEW_PID"
      if [ -n "$OLD_PID" ]; then
        run_case "$mode-c$c old" "$c" "http://127.0.0.1:$OLD_SVC$P" "$script" "$OLD_PID"
      fi
    done
  done
done
stop_svc
if [ -n "$OLD_PID" ]; then kill "$OLD_PID" 2>/dev/null || true; wait "$OLD_PID" 2>/dev/null || true; fi
# CPU seconds per GiB served, over every case and round: the efficiency
# figure that does not depend on who else shares the cores.
awk -v hz="$(getconf CLK_TCK)" -v d="$DURATION" '{ b[$2]+=$3*d; t[$2]+=$4 }
  END { printf "CPU per GiB served (all cases): nginx sendfile %.3f s, talos-gen %.3f s (%.2fx)\n",
        t["nginx"]/hz/(b["nginx"]/1073741824), t["ours"]/hz/(b["ours"]/1073741824),
        (t["ours"]/b["ours"])/(t["nginx"]/b["nginx"])
        if (b["old"] > 0)
          printf "CPU per GiB served (all cases): old build %.3f s (%.2fx nginx; new/old %.2f)\n",
            t["old"]/hz/(b["old"]/1073741824), (t["old"]/b["old"])/(t["nginx"]/b["nginx"]),
            (t["ours"]/b["ours"])/(t["old"]/b["old"]) }' "$W/tp"
# One line per case, in the order run, each with its own PASS/FAIL against
# 0.9x (on the best of the rounds; the mean is printed beside it).
awk '{ k=$1" "$2; s[k]+=$3; n[k]++; if ($3>b[k]) b[k]=$3; if (!($1 in seen)) { seen[$1]=1; order[++nc]=$1 } }
  END { fail=0
        for (i=1; i<=nc; i++) {
          c=order[i]
          bn=b[c" nginx"]; bo=b[c" ours"]; mn=s[c" nginx"]/n[c" nginx"]; mo=s[c" ours"]/n[c" ours"]
          ok=(bo/bn >= 0.9)
          printf "%-12s nginx sendfile best %8.1f MiB/s  talos-gen best %8.1f MiB/s  ratio best %.3f mean %.3f  %s (>= 0.9)\n", c, bn/1048576, bo/1048576, bo/bn, mo/mn, (ok ? "PASS" : "FAIL")
          if (!ok) fail=1
        }
        print (fail ? "cached serving: FAIL" : "cached serving: PASS") }' "$W/tp"
# Old against new, per case: each build's median over its rounds beside
# nginx's median, and new/old (the median of the rounds, not the best).
if [ -n "$OLD_PID" ]; then
  for c in $(awk '{print $1}' "$W/tp" | awk '!s[$0]++'); do
    med() { grep "^$c $1 " "$W/tp" | awk '{print $3}' | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
    awk -v c="$c" -v n="$(med nginx)" -v o="$(med ours)" -v d="$(med old)" 'BEGIN {
      printf "%-12s median ratio to nginx: new %.3f old %.3f  new/old %.3f\n", c, o/n, d/n, o/d }'
  done
fi

# PARTS=1 stops here (part 1 only: the throughput and CPU figures); the
# default runs all three parts.
if [ "${PARTS:-3}" = 1 ]; then exit 0; fi

cold_run() { # label url -> lines "ttfb total" in $W/cold-<label>
  local label=$1 url=$2
  local cp=()
  rm -f "$W/cold-$label"
  for i in $(seq 16); do
    curl -sf -o /dev/null -w '%{time_starttransfer} %{time_total}\n' "$url" >> "$W/cold-$label" &
    cp+=($!)
  done
  for p in "${cp[@]}"; do wait "$p" || true; done
  [ "$(wc -l < "$W/cold-$label")" = 16 ] || { echo "cold run $label: not all 16 clients succeeded" >&2; cat "$W/svc.log" >&2; exit 1; }
}

echo "# 2. 16 cold clients, upstream limit_rate $RATE"
BASE=$(curl -sf -o /dev/null -w '%{time_starttransfer} %{time_total}' "http://127.0.0.1:$NG_UP$P")
read -r UP_TTFB UP_TOTAL <<< "$BASE"
echo "plain upstream download: ttfb ${UP_TTFB}s total ${UP_TOTAL}s"

start_svc "$W/cache-cold" "$NG_UP"
cold_run ours "http://127.0.0.1:$SVC$P"
RSS_KB=$(awk '/VmHWM/{print $2}' /proc/$SVC_PID/status)
UPGETS=$(grep -c "GET $P" "$W/up/access.log" || true)
stop_svc
cold_run nginx "http://127.0.0.1:$NG_PC$P"

# Baseline for this machine's scheduling noise: 16 clients straight at the
# upstream at once (16 separate transfers, no cache in between).
cold_run direct "http://127.0.0.1:$NG_UP$P"

report() {
  sort -n "$W/cold-$1" | awk -v up_t="$UP_TTFB" -v up_d="$UP_TOTAL" -v name="$2" '
    { t[NR]=$1; if ($2>md) md=$2 }
    END { printf "%-34s ttfb median %.3fs max %.3fs (max - plain upstream ttfb: %5.0f ms; must be <= 50)  last done %.3fs (%.3fx plain download; must be <= 1.2)\n", name, t[int((NR+1)/2)], t[NR], (t[NR]-up_t)*1000, md, md/up_d }'
}
report ours "talos-gen"
report nginx "nginx proxy_cache + cache_lock"
report direct "16 direct to upstream (baseline)"

echo "upstream GETs for the talos-gen cold run (incl. the plain download): $UPGETS (expect 2)"
echo "# 3. peak RSS of talos-gen during the cold run: $((RSS_KB / 1024)) MiB (must be < 64)"
