# Sourced by the service benchmark scripts (bench.sh, bench-history.sh,
# bench-alerting.sh), after they set BENCH_NAME, their log prefix: the
# log, the free port and the build they all need.

log() { printf '%s: %s\n' "$BENCH_NAME" "$*" >&2; }
die() { log "$*"; exit 1; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pick_port FROM TO: unless BENCH_PORT is set, it becomes the first free
# port from FROM to TO.
pick_port() {
  [ -z "${BENCH_PORT:-}" ] || return 0
  local p
  for p in $(seq "$1" "$2"); do
    if port_free "$p"; then BENCH_PORT=$p; return 0; fi
  done
  die "no free port in $1-$2"
}

# build_bench SERVICE: bin/SERVICE and bin/SERVICE-bench, its benchmark.
build_bench() {
  log "building bin/$1 and bin/$1-bench"
  go build -o "bin/$1" "./services/$1/cmd/$1"
  go build -o "bin/$1-bench" "./bench/cmd/$1"
}
