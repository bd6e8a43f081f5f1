#!/usr/bin/env bash
# CPU seconds per GiB served, on one case, of nginx `sendfile on`, nginx
# `sendfile off` (a read into a buffer and a write from it: the copies
# talos-gen makes, without its check) and each talos-gen binary given,
# alternated round by round (wrk -t2, 5 s a run), over a 64 MiB artifact.
# The figure that depends least on who else shares the cores; for comparing
# builds of the serving path (issue 52). Needs nginx, wrk, curl, xz.
# Usage: bench/cpu.sh range|whole CONNECTIONS ROUNDS BINARY...
#   e.g. bench/cpu.sh range 64 4 target/release/talos-gen /tmp/old/talos-gen
# Stops everything it started on every exit path (bench/lib.sh).
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: bench/cpu.sh range|whole CONNECTIONS ROUNDS BINARY..." >&2; exit 2; }
MODE=$1 C=$2 ROUNDS=$3; shift 3
case $MODE in range|whole) ;; *) echo "bench/cpu.sh: mode $MODE is neither range nor whole" >&2; exit 2;; esac
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/bench/lib.sh"
need_tools nginx wrk curl xz
W=$WORK
factory_artifact 64 >/dev/null
ngx() { # name port sendfile
  mkdir -p $W/$1
  cat > $W/$1/nginx.conf <<NG
daemon off; master_process on; worker_processes 2; user root;
error_log $W/$1/error.log; pid $W/$1/nginx.pid;
events { worker_connections 1024; }
http { access_log off; sendfile $3; tcp_nopush on; keepalive_requests 100000;
  output_buffers 2 256k;
  server { listen 127.0.0.1:$2; root $W/root; } }
NG
  nginx -c $W/$1/nginx.conf -p $W/$1 & track $!
  wait_http http://127.0.0.1:$2/
}
P1=$(free_port); ngx on $P1 on
P2=$(free_port); ngx off $P2 off
pids_of() { local m; m=$(pgrep -f "$W/$1/nginx.conf" | head -n1); echo "$m $(pgrep -P $m | tr '\n' ' ')"; }
declare -a NAMES URLS SPIDS
NAMES+=(nginx-sendfile); URLS+=(http://127.0.0.1:$P1$P); SPIDS+=("$(pids_of on)")
NAMES+=(nginx-copy); URLS+=(http://127.0.0.1:$P2$P); SPIDS+=("$(pids_of off)")
i=0
for b in "$@"; do [ -x "$b" ] || { echo "bench/cpu.sh: $b is not an executable" >&2; exit 2; }; done
for b in "$@"; do
  i=$((i+1)); port=$(free_port)
  RUST_LOG=warn $b serve --listen 127.0.0.1:$port --cache-dir $W/c$i --factory-url http://127.0.0.1:$P1 2>$W/svc$i.log & pid=$!; track $pid
  wait_http http://127.0.0.1:$port/healthz
  curl -sf -o /dev/null http://127.0.0.1:$port$P; sleep 0.5; curl -sf -o /dev/null http://127.0.0.1:$port$P
  NAMES+=("$b"); URLS+=(http://127.0.0.1:$port$P); SPIDS+=("$pid")
done
cat > $W/range.lua <<LUA
math.randomseed(7)
request = function()
  local off = math.random(0, $LEN - 1048577)
  return wrk.format("GET", nil, { ["Range"] = "bytes=" .. off .. "-" .. (off + 1048575) })
end
LUA
S=""; [ $MODE = range ] && S="-s $W/range.lua"
ticks() { local t=0 p; for p in $1; do t=$((t + $(awk '{sub(/^.*\) /,""); print $12+$13}' /proc/$p/stat))); done; echo $t; }
to_bytes() { awk -v v="$1" 'BEGIN{ n=v+0; u=v; sub(/^[0-9.]+/,"",u); m=1; if(u=="KB")m=1024; if(u=="MB")m=1048576; if(u=="GB")m=1073741824; printf "%.0f", n*m }'; }
: > $W/tp
for r in $(seq $ROUNDS); do
  for k in "${!NAMES[@]}"; do
    t0=$(ticks "${SPIDS[$k]}")
    rate=$(wrk -c$C -t2 -d5s $S ${URLS[$k]} | awk '/Transfer\/sec/{print $2}')
    echo "${NAMES[$k]} $(to_bytes $rate) $(( $(ticks "${SPIDS[$k]}") - t0 ))" >> $W/tp
  done
done
awk -v hz=$(getconf CLK_TCK) '{b[$1]+=$2*5; t[$1]+=$3; r[$1]+=$2; n[$1]++} END { for (k in b) printf "%-44s CPU %.3f s/GiB  mean %.0f MiB/s\n", k, t[k]/hz/(b[k]/1073741824), r[k]/n[k]/1048576 }' $W/tp | sort
