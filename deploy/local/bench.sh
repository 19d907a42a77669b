#!/usr/bin/env bash
# Benchmarks the registry (`make bench`, which first starts PostgreSQL and
# RabbitMQ and builds bin/registry): starts a registry on a spare port with
# its own schema and exchange, drives it with bin/registry-bench (load the
# jobs table, ListJobs on it, CreateJob at 500/s, BatchCreateJobs), stops
# it, drops the schema and the exchange, and prints where the report is.
#
# Environment:
#   BENCH_JOBS        jobs to load for the list scenario (default 1000000;
#                     5000000 also judges the "5,000,000 jobs" target)
#   BENCH_SCENARIOS   subset and order of: load list create batch
#   BENCH_OUT         report directory (default bin/bench/<UTC time>)
#   BENCH_PORT        registry port (default: a free one from 18100)
#   BENCH_WAIT_QUIET  how long each scenario may wait for an idle machine
#                     before measuring (default 60s; 0 does not wait)
#   BENCH_ARGS        extra flags for every registry-bench call, e.g.
#                     "--protocol grpc"
#
# Exit status: non-zero when a scenario fails (a call errors, the registry
# dies); a missed speed target is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

# The whole run holds /tmp/cronmesh-bench.lock, so benchmarks never overlap
# (flock -o: a server started meanwhile does not inherit the lock).
if [ -z "${CRONMESH_BENCH_LOCKED:-}" ]; then
  export CRONMESH_BENCH_LOCKED=1
  exec flock -o /tmp/cronmesh-bench.lock "$0" "$@"
fi

BENCH_JOBS=${BENCH_JOBS:-1000000}
BENCH_SCENARIOS=${BENCH_SCENARIOS:-load list create batch}
BENCH_OUT=${BENCH_OUT:-bin/bench/$(date -u +%Y%m%dT%H%M%SZ)}
BENCH_WAIT_QUIET=${BENCH_WAIT_QUIET:-60s}
BENCH_ARGS=${BENCH_ARGS:-}

BENCH_NAME=bench
# shellcheck source=deploy/local/bench-lib.sh
. deploy/local/bench-lib.sh

pick_port 18100 18199
build_bench registry

mkdir -p "$BENCH_OUT"
REPORT=$BENCH_OUT/report.md
REGISTRY_LOG=$BENCH_OUT/registry.log
# Unique per run, so a run never touches another's data or a developer's.
RUN=$(date -u +%Y%m%d%H%M%S)_$$
SCHEMA=bench_$RUN
EXCHANGE=cronmesh.jobs.bench_$RUN
# The key exists for the life of this run only; registry-bench reads it from
# the environment so that it appears in no command line or report.
export CRONMESH_API_KEY=bench_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
URL=http://127.0.0.1:$BENCH_PORT
CLK_TCK=$(getconf CLK_TCK)

registry_pid=
failed=()

# registry_usage appends the registry's CPU time and memory, from /proc, to
# the report: what the process cost over the whole run.
registry_usage() {
  local pid=$1 stat status ticks start uptime elapsed rss hwm
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
  status=$(cat "/proc/$pid/status" 2>/dev/null) || return 0
  # Fields after "(comm)": state is field 3, utime 14, stime 15, starttime 22.
  read -r -a f <<<"${stat##*) }"
  ticks=$((f[11] + f[12]))
  start=${f[19]}
  uptime=$(cut -d' ' -f1 /proc/uptime)
  elapsed=$(awk -v u="$uptime" -v s="$start" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", u - s / hz }')
  rss=$(awk '/^VmRSS:/ { printf "%.1f MiB", $2 / 1024 }' <<<"$status")
  hwm=$(awk '/^VmHWM:/ { printf "%.1f MiB", $2 / 1024 }' <<<"$status")
  {
    printf '\n### Registry process over the whole run\n\n'
    printf '| metric | value |\n| --- | ---: |\n'
    printf '| wall time since start | %s s |\n' "$elapsed"
    awk -v t="$ticks" -v hz="$CLK_TCK" -v e="$elapsed" 'BEGIN {
      printf "| CPU time (user + system) | %.1f s |\n", t / hz
      if (e > 0) printf "| mean CPU use | %.2f cores |\n", t / hz / e }'
    printf '| resident memory at the end | %s |\n' "$rss"
    printf '| peak resident memory (VmHWM) | %s |\n' "$hwm"
    printf '\nFrom /proc/%s/stat and /proc/%s/status (CLK_TCK %s).\n' "$pid" "$pid" "$CLK_TCK"
  } >>"$REPORT"
}

stop_registry() {
  [ -n "$registry_pid" ] || return 0
  if kill -0 "$registry_pid" 2>/dev/null; then
    registry_usage "$registry_pid"
    log "stopping the registry (pid $registry_pid)"
    kill -TERM "$registry_pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$registry_pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$registry_pid" 2>/dev/null; then
      log "the registry did not stop within 30s of SIGTERM; killing it"
      kill -KILL "$registry_pid" 2>/dev/null || true
    fi
  fi
  wait "$registry_pid" 2>/dev/null || true
  registry_pid=
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_registry
  bin/registry-bench cleanup --schema "$SCHEMA" --exchange "$EXCHANGE" 2>&1 | sed 's/^/bench: /' >&2 ||
    log "cleanup failed: drop schema $SCHEMA and delete exchange $EXCHANGE by hand"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

log "starting the registry on $URL (schema $SCHEMA, exchange $EXCHANGE)"
# A benchmark measures capacity, not the quotas: no rate limit, no job cap.
CRONMESH_API_KEYS="bench=$CRONMESH_API_KEY" CRONMESH_RATE_LIMIT=off CRONMESH_MAX_JOBS=0 bin/registry serve \
  --listen "127.0.0.1:$BENCH_PORT" --schema "$SCHEMA" --exchange "$EXCHANGE" --log-level warn \
  >"$REGISTRY_LOG" 2>&1 &
registry_pid=$!
for _ in $(seq 150); do
  curl -sf "$URL/readyz" >/dev/null 2>&1 && break
  kill -0 "$registry_pid" 2>/dev/null || die "the registry exited at start; see $REGISTRY_LOG"
  sleep 0.2
done
curl -sf "$URL/readyz" >/dev/null || die "the registry is not ready after 30s; see $REGISTRY_LOG"

{
  printf '# Registry benchmark, %s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'Run by `%s` at commit %s%s.\n' \
    "BENCH_SCENARIOS='$BENCH_SCENARIOS' BENCH_JOBS=$BENCH_JOBS deploy/local/bench.sh" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  printf 'Registry: `bin/registry serve --listen 127.0.0.1:%s --schema %s --exchange %s --log-level warn` (default pool, 16 outbox lanes; no queue is bound to the exchange).\n' \
    "$BENCH_PORT" "$SCHEMA" "$EXCHANGE"
} >"$REPORT"

# bench runs one registry-bench scenario against the registry, appending to
# the report; a failure is remembered and the remaining scenarios still run,
# except those that need what failed.
bench() {
  local scenario=$1; shift
  log "scenario $scenario"
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
  if ! bin/registry-bench "$scenario" --registry-url "$URL" --schema "$SCHEMA" --registry-pid "$registry_pid" \
    --out "$REPORT" --wait-quiet "$BENCH_WAIT_QUIET" $BENCH_ARGS "$@" >/dev/null; then
    failed+=("$scenario")
    return 1
  fi
  kill -0 "$registry_pid" 2>/dev/null || { failed+=("registry died during $scenario"); return 1; }
}

bin/registry-bench machine --out "$REPORT" >/dev/null || failed+=(machine)
loaded=yes
for scenario in $BENCH_SCENARIOS; do
  case $scenario in
    load) bench load --jobs "$BENCH_JOBS" || loaded=no ;;
    list)
      if [ "$loaded" = yes ]; then bench list || true; else log "skipping list: the load failed"; fi ;;
    create) bench create || true ;;
    batch) bench batch || true ;;
    *) die "unknown scenario $scenario in BENCH_SCENARIOS (want load, list, create, batch)" ;;
  esac
done

stop_registry
log "report: $REPORT (registry log: $REGISTRY_LOG)"
echo
echo "Targets (details in $REPORT):"
grep -E '^- \*\*(MET|MISSED|NOT JUDGED)\*\*' "$REPORT" | sed 's/^- /  /; s/\*\*//g' || echo "  none judged"
if grep -qE '^- \*\*MISSED\*\*' "$REPORT"; then
  echo "Some speed targets were MISSED (a benchmark result, not a failure of this run)."
fi
if [ ${#failed[@]} -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
