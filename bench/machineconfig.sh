#!/usr/bin/env bash
# Benchmarks for worker machine configs (not tests). Needs hyperfine and wrk.
#
#   bench/machineconfig.sh            # release build, then both benchmarks
#
# 1. Whole process: `talos-gen machineconfig --with-secrets ...` (target:
#    median < 20 ms), side by side with what it replaces: the Cozystack
#    chart's shell heredoc (`sh -c 'cat <<EOF ... EOF'`) writing the same
#    config. Reported as a ratio.
# 2. `POST /api/v1/machineconfig` against `talos-gen serve` on loopback
#    with wrk (target: >= 5000 req/s on 2 cores), beside GET /healthz on
#    the same server (the framework's ceiling). Reported as a ratio.
# Stops everything it started on every exit path (success, failure, Ctrl-C,
# SIGTERM): the one server it starts, by PID, from the trap on EXIT.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
shared="${TALOS_GEN_REFERENCE_DIR:-$here/../shared}"
secrets="$shared/talos-golden/secrets.yaml"
values="$shared/cozystack/kubernetes-nodes.values.yaml"
bin="$here/target/release/talos-gen"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

(cd "$here" && cargo build --release --quiet)

args=(machineconfig --with-secrets "$secrets" --cluster-name base --endpoint https://base:6443
      --kubernetes-version 1.35.6 --talos-version v1.13.6)
cozy=(machineconfig --with-secrets "$secrets" --profile cozystack -f "$values"
      --cluster-name kubernetes-demo --endpoint https://kubernetes-demo.ns.svc:6443)

# The heredoc peer writes the already-rendered config, as the chart's Job does.
"$bin" "${cozy[@]}" > "$work/rendered.yaml"
{
  echo 'cat <<EOF'
  cat "$work/rendered.yaml"
  echo 'EOF'
} > "$work/heredoc.sh"

echo "== whole process (hyperfine)"
hyperfine --warmup 20 --min-runs 200 -N --export-json "$work/cli.json" \
  -n talos-gen "$bin ${args[*]}" \
  -n talos-gen-cozystack "$bin ${cozy[*]}" \
  -n heredoc "sh $work/heredoc.sh"
python3 - "$work/cli.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
med = {k: v["median"] * 1000 for k, v in r.items()}
for k, v in med.items():
    print(f"median {k}: {v:.2f} ms")
print(f"ratio talos-gen-cozystack / heredoc: {med['talos-gen-cozystack'] / med['heredoc']:.2f}x")
print("target: talos-gen median < 20 ms:", "PASS" if med["talos-gen"] < 20 else "FAIL")
PY

echo "== POST /api/v1/machineconfig (wrk)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin" serve --listen "127.0.0.1:$port" --cache-dir "$work/cache" --offline >"$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.05
done
python3 - "$secrets" "$work/body.json" <<'PY'
import json, sys
body = {"clusterName": "base", "endpoint": "https://base:6443", "talosVersion": "v1.13.6",
        "kubernetesVersion": "1.35.6", "secrets": open(sys.argv[1]).read()}
open(sys.argv[2], "w").write(json.dumps(body))
PY
cat > "$work/post.lua" <<LUA
local f = io.open("$work/body.json", "r")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA
curl -fsS -X POST -H 'content-type: application/json' --data-binary @"$work/body.json" \
  "http://127.0.0.1:$port/api/v1/machineconfig" | head -3
wrk -t2 -c32 -d10s -s "$work/post.lua" "http://127.0.0.1:$port/api/v1/machineconfig" | tee "$work/post.txt"
wrk -t2 -c32 -d5s "http://127.0.0.1:$port/healthz" | tee "$work/healthz.txt"
post="$(awk '/Requests\/sec/ {print $2}' "$work/post.txt")"
health="$(awk '/Requests\/sec/ {print $2}' "$work/healthz.txt")"
python3 - "$post" "$health" <<'PY'
import sys
post, health = float(sys.argv[1]), float(sys.argv[2])
print(f"POST /api/v1/machineconfig: {post:.0f} req/s; GET /healthz: {health:.0f} req/s; ratio {post/health:.2f}")
print("target: >= 5000 req/s:", "PASS" if post >= 5000 else "FAIL")
PY
