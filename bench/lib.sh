# Shared by the bench/ scripts: a work dir and the processes started in it,
# stopped and removed on exit; free ports; waiting for a server; pushing
# blobs and manifests to a registry over the plain registry API; /proc facts.
# Source it: `. "$ROOT/bench/lib.sh"` (ROOT: the repository).

WORK=$(mktemp -d /tmp/talos-gen-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_http URL: until it answers at all (any status), at most 20 s.
wait_http() { for _ in $(seq 400); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done; echo "$1 did not come up" >&2; exit 1; }

push_blob() { # base repo file -> prints digest
  local base=$1 repo=$2 file=$3 digest loc
  digest="sha256:$(sha256sum "$file" | cut -d' ' -f1)"
  loc=$(curl -sf -X POST -D - -o /dev/null "$base/v2/$repo/blobs/uploads/" | tr -d '\r' | awk 'tolower($1)=="location:"{print $2}')
  case $loc in /*) loc="$base$loc";; esac
  case $loc in *\?*) loc="$loc&digest=$digest";; *) loc="$loc?digest=$digest";; esac
  curl -sf -X PUT -H 'content-type: application/octet-stream' --data-binary "@$file" "$loc" -o /dev/null
  echo "$digest"
}

push_manifest() { # base repo ref type file
  curl -sf -X PUT -H "content-type: $4" --data-binary "@$5" "$1/v2/$2/manifests/$3" -o /dev/null
}

status_kib() { awk -v k="$2:" '$1==k{print $2}' "/proc/$1/status"; } # pid field
fds() { ls "/proc/$1/fd" | wc -l; } # pid
