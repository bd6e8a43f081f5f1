# Shared by the bench/ scripts: a work dir and the processes started in it,
# stopped and removed on every exit path (success, failure, set -e, Ctrl-C,
# SIGTERM, SIGHUP); free ports; waiting for a server; the tools and the
# release build a script needs; nginx under a work dir; a factory artifact to
# serve; docker-registry;
# pushing blobs and manifests to a registry over the plain registry API;
# /proc facts.
# Source it: `. "$ROOT/bench/lib.sh"` (ROOT: the repository).
#
# Every process a script starts in the background is registered with
# `track PID` (by PID, in $WORK/.pids, so that a start inside a command
# substitution, `X=$(start_it)`, is registered too: an array assignment there
# is lost with the subshell, which is how bench/s3.sh left both `serve`
# replicas running). On exit each tracked process and each background job of
# the script gets SIGTERM (and SIGCONT, for one a script stopped), then
# SIGKILL after 5 s; then the script's own `on_cleanup` runs when it defines
# one (e.g. to unmount what it mounted in the work dir), and the work dir goes.

WORK=$(mktemp -d /tmp/talos-gen-bench.XXXXXX)
PIDS=()
# track PID...: stop PID when the script exits, however it exits.
track() {
  local p
  for p in "$@"; do
    PIDS+=("$p")
    echo "$p" >> "$WORK/.pids"
  done
}
# Is PID a live process (not gone, not a zombie)?
pid_alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{sub(/^.*\) /,""); print $1}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
cleanup() {
  local rc=$? p all=() left=()
  trap - EXIT INT TERM HUP
  [ -f "$WORK/.pids" ] && mapfile -t all < "$WORK/.pids"
  all+=("${PIDS[@]}")
  mapfile -t -O "${#all[@]}" all < <(jobs -p)
  for p in "${all[@]}"; do [ -n "$p" ] && { kill -TERM "$p"; kill -CONT "$p"; } 2>/dev/null || true; done
  for _ in $(seq 50); do
    left=()
    for p in "${all[@]}"; do [ -n "$p" ] && pid_alive "$p" && left+=("$p"); done
    ((${#left[@]})) || break
    sleep 0.1
  done
  for p in "${left[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F on_cleanup > /dev/null; then on_cleanup || true; fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_http URL: until it answers at all (any status), at most 20 s.
wait_http() { for _ in $(seq 400); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done; echo "$1 did not come up" >&2; exit 1; }

# need_tools TOOL...: exit 2 naming the first one that is not installed.
need_tools() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "missing tool: $t" >&2; exit 2; }
  done
}

# need_bin: exit 2 unless $BIN (the release build) is there.
need_bin() { [ -x "$BIN" ] || { echo "build first: cargo build --release ($BIN)" >&2; exit 2; }; }

# nginx_start DIR WORKERS: nginx in the foreground under DIR (its conf, logs,
# pid and temp dirs there) with WORKERS workers, the inside of its http {}
# block read from stdin; tracked; its master's PID in NGINX_PID.
nginx_start() {
  local d=$1
  mkdir -p "$d"
  {
    printf 'daemon off;\nworker_processes %s;\nuser root;\nerror_log %s/error.log;\npid %s/nginx.pid;\n' "$2" "$d" "$d"
    printf 'events { worker_connections 1024; }\nhttp {\n  client_body_temp_path %s/body;\n  proxy_temp_path %s/tmp;\n' "$d" "$d"
    cat
    echo '}'
  } > "$d/nginx.conf"
  nginx -c "$d/nginx.conf" -p "$d" &
  NGINX_PID=$!
  track "$NGINX_PID"
}

# factory_artifact MIB: MIB MiB of random data as xz, at the factory's path
# P=/image/$S/$V/$A under $WORK/root; sets S, V, A, P and LEN (its bytes).
factory_artifact() {
  S=376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba
  V=v1.13.6
  A=openstack-amd64.raw.xz
  P=/image/$S/$V/$A
  echo "# generating a $1 MiB artifact (xz of random data)"
  mkdir -p "$WORK/root/image/$S/$V"
  head -c $(($1 << 20)) /dev/urandom | xz -0 -T2 -c > "$WORK/root$P"
  LEN=$(stat -c %s "$WORK/root$P")
}

# start_registry NAME PORT [REMOTE] [LOG]: docker-registry on 127.0.0.1:PORT,
# storage and log under $WORK/NAME, a pull-through proxy of REMOTE if given;
# LOG its `log:` setting (default: info with the access log).
start_registry() {
  local name=$1 port=$2 remote=${3:-} log=${4:-"{level: info, accesslog: {disabled: false}}"}
  mkdir -p "$WORK/$name/storage"
  {
    echo "version: 0.1"
    echo "log: $log"
    echo "storage: {filesystem: {rootdirectory: $WORK/$name/storage}, delete: {enabled: true}}"
    echo "http: {addr: 127.0.0.1:$port}"
    if [ -n "$remote" ]; then echo "proxy: {remoteurl: $remote}"; fi
  } > "$WORK/$name/config.yml"
  docker-registry serve "$WORK/$name/config.yml" > "$WORK/$name/log" 2>&1 &
  track $!
  wait_http "http://127.0.0.1:$port/v2/"
}

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

# push_factory_image BASE REPO TAG DIR MIB...: an image shaped like the
# factory's installer: an OCI index over linux/amd64 and linux/arm64 Docker
# schema-2 manifests, each with random layers of the given sizes (MiB) and a
# config. Files go to DIR (layers and configs there are the blobs); sets
# INDEX_DIGEST.
push_factory_image() {
  local base=$1 repo=$2 tag=$3 dir=$4; shift 4
  local entries=() arch mib f d i cfg cd_ man md idx ljson diffs
  mkdir -p "$dir"
  for arch in amd64 arm64; do
    ljson=() diffs=() i=0
    for mib in "$@"; do
      f="$dir/$arch-$i"; i=$((i+1))
      head -c $((mib * 1024 * 1024)) /dev/urandom > "$f"
      d=$(push_blob "$base" "$repo" "$f")
      ljson+=("{\"mediaType\":\"application/vnd.docker.image.rootfs.diff.tar.gzip\",\"size\":$(stat -c %s "$f"),\"digest\":\"$d\"}")
      diffs+=("\"$d\"")
    done
    cfg="$dir/$arch-config.json"
    printf '{"architecture":"%s","os":"linux","rootfs":{"type":"layers","diff_ids":[%s]}}' \
      "$arch" "$(IFS=,; echo "${diffs[*]}")" > "$cfg"
    cd_=$(push_blob "$base" "$repo" "$cfg")
    man="$dir/$arch-manifest.json"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":%s,"digest":"%s"},"layers":[%s]}' \
      "$(stat -c %s "$cfg")" "$cd_" "$(IFS=,; echo "${ljson[*]}")" > "$man"
    md="sha256:$(sha256sum "$man" | cut -d' ' -f1)"
    push_manifest "$base" "$repo" "$md" application/vnd.docker.distribution.manifest.v2+json "$man"
    entries+=("{\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\"size\":$(stat -c %s "$man"),\"digest\":\"$md\",\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"}}")
  done
  idx="$dir/index.json"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "$(IFS=,; echo "${entries[*]}")" > "$idx"
  push_manifest "$base" "$repo" "$tag" application/vnd.oci.image.index.v1+json "$idx"
  INDEX_DIGEST="sha256:$(sha256sum "$idx" | cut -d' ' -f1)"
}
