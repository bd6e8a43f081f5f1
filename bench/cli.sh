#!/usr/bin/env bash
# Benchmark (not a test): `matrix check` and `schematic id` as whole
# processes, on a release build, with hyperfine. Both must stay under 10 ms
# median. Shown beside the floor a user pays for any process (`true`) and the
# nearest local peer for an ID (`sha256sum` of an already-canonical file,
# which is all a shell script could do without talking to the factory),
# as ratios. `talos-gen --version` shows what starting this binary costs
# before any work (exec, dynamic relocations, page faults of a ~7 MB binary).
#
#   bench/cli.sh            # prints medians and ratios; exit 1 if over budget
# Starts no background process (hyperfine runs each command to its end);
# its temp dir is removed on every exit path (trap on EXIT).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v hyperfine >/dev/null || { echo "bench/cli.sh: hyperfine is not installed" >&2; exit 2; }
cargo build --release --quiet
BIN=target/release/talos-gen
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# The canonical cozystack schematic, for the sha256sum peer.
"$BIN" schematic canonical schematics/cozystack.yaml >"$OUT/canonical.yaml"

hyperfine --shell=none --warmup 20 --min-runs 200 --export-json "$OUT/r.json" \
    -n "matrix check" "$BIN matrix check --talos v1.13.6 --kubernetes v1.35" \
    -n "schematic id" "$BIN schematic id schematics/cozystack.yaml" \
    -n "talos-gen --version" "$BIN --version" \
    -n "true (process floor)" "true" \
    -n "sha256sum (peer)" "sha256sum $OUT/canonical.yaml" >&2

python3 - "$OUT/r.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
ms = lambda n: r[n]["median"] * 1000
floor, peer = ms("true (process floor)"), ms("sha256sum (peer)")
bad = False
# cpu ms = mean user + system time: what the process itself costs, less
# sensitive than wall time to other load on the machine.
print(f"{'command':<22}{'median ms':>10}{'mean ms':>10}{'cpu ms':>8}{'x true':>9}{'x sha256sum':>13}")
for n in r:
    m = ms(n)
    cpu = (r[n]["user"] + r[n]["system"]) * 1000
    print(f"{n:<22}{m:>10.2f}{r[n]['mean']*1000:>10.2f}{cpu:>8.2f}{m/floor:>9.1f}{m/peer:>13.1f}")
for n in ("matrix check", "schematic id"):
    if ms(n) >= 10:
        print(f"OVER BUDGET: {n} median {ms(n):.2f} ms >= 10 ms")
        bad = True
sys.exit(1 if bad else 0)
PY
