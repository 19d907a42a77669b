#!/usr/bin/env bash
# The end-to-end benchmark of the whole mesh (part of `make bench`):
# bin/mesh-bench (bench/cmd/mesh) starts the mesh from bin/ (`make build`)
# as `make dev` runs it — registry, three trigger nodes, dispatcher,
# history, alerting and devetcd with the binaries' defaults — on the local
# PostgreSQL and RabbitMQ, each scenario on names of its own
# (mb_<tag>_<scenario>), and removes them at the end. Every scenario but
# memory measures the machine's ceilings (RabbitMQ publish+consume with
# confirms, batched PostgreSQL inserts) first, in the same run, so results
# read as a ratio. Runs under flock /tmp/cronmesh-bench.lock so that no
# other benchmark overlaps it.
#
#   capacity   a ramp of every-second crons from BENCH_MESH_RAMP_FROM to at
#              most BENCH_MESH_RAMP_MAX executions/s, a minute a step: the
#              highest rate held with a p99 lateness under 1 s, CPU per
#              execution                       (10 steps: about 13 min)
#   sustained  a mix of cron (every second, every minute, on the top-of-minute
#              second), interval and one-time jobs at BENCH_MESH_RATE
#              executions/s for BENCH_MESH_DURATION, CPU profiles of every
#              service in the middle (summarised after the window)
#                                              (10 min window: about 14 min)
#   burst      BENCH_MESH_BURST_JOBS one-time jobs due on one second (about 4 min)
#   memory     BENCH_MESH_MEMORY_JOBS jobs in the trigger tier (about 6 min;
#              about 2 GB of disk while it runs)
#
# Environment:
#   BENCH_MESH_SCENARIOS     subset and order (default: capacity sustained burst memory)
#   BENCH_MESH_RAMP_FROM     first step of capacity (default 1000)
#   BENCH_MESH_RAMP_STEP     increase per step (default 1000)
#   BENCH_MESH_RAMP_MAX      last step (default 10000)
#   BENCH_MESH_STEP          length of a step (default 1m)
#   BENCH_MESH_RATE          executions/s of sustained (default 3000)
#   BENCH_MESH_DURATION      window of sustained (default 10m)
#   BENCH_MESH_BURST_JOBS    default 100000
#   BENCH_MESH_MEMORY_JOBS   default 5000000
#   BENCH_MESH_ARGS          extra flags for every scenario, e.g. "--profile=false"
#   BENCH_OUT                report directory (default bin/bench/mesh-<UTC time>)
#
# Exit status: non-zero when a scenario cannot run (a service dies, loading
# fails, ...); a missed target is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${BENCH_MESH_LOCKED:-}" ]; then
  echo "bench-mesh: waiting for /tmp/cronmesh-bench.lock" >&2
  exec env BENCH_MESH_LOCKED=1 flock -o /tmp/cronmesh-bench.lock "$0" "$@"
fi

SCENARIOS=${BENCH_MESH_SCENARIOS:-capacity sustained burst memory}
RAMP_FROM=${BENCH_MESH_RAMP_FROM:-1000}
RAMP_STEP=${BENCH_MESH_RAMP_STEP:-1000}
RAMP_MAX=${BENCH_MESH_RAMP_MAX:-10000}
STEP=${BENCH_MESH_STEP:-1m}
RATE=${BENCH_MESH_RATE:-3000}
DURATION=${BENCH_MESH_DURATION:-10m}
BURST_JOBS=${BENCH_MESH_BURST_JOBS:-100000}
MEMORY_JOBS=${BENCH_MESH_MEMORY_JOBS:-5000000}
BENCH_OUT=${BENCH_OUT:-bin/bench/mesh-$(date -u +%Y%m%dT%H%M%SZ)}
BENCH_MESH_ARGS=${BENCH_MESH_ARGS:-}
log() { printf 'bench-mesh: %s\n' "$*" >&2; }

for svc in registry trigger dispatcher history alerting devetcd; do
  [ -x "bin/$svc" ] || { log "bin/$svc is missing: run make build"; exit 1; }
done
log "building bin/mesh-bench"
go build -o bin/mesh-bench ./bench/cmd/mesh
deploy/local/ensure-services.sh

mkdir -p "$BENCH_OUT"
REPORT=$BENCH_OUT/report.md
TAG=s$$
common=(--tag "$TAG" --out "$REPORT" --work-dir "$BENCH_OUT/work")
# shellcheck disable=SC2206 # BENCH_MESH_ARGS is split on purpose
extra=($BENCH_MESH_ARGS)
{
  printf '# End-to-end benchmark, %s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'Commit %s%s. Scenarios: %s. Load average before: %s. Machine shared with: whatever else ran (see each scenario'"'"'s load average and CPU table).\n' \
    "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')" \
    "$SCENARIOS" "$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$REPORT"

bench_pid=
failed=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    # mesh-bench stops the mesh and drops its schemas and queues on SIGTERM.
    kill -TERM "$bench_pid" 2>/dev/null || true
    wait "$bench_pid" 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

run() {
  local name=$1 limit=$2
  shift 2
  log "scenario $name (at most $limit)"
  set +e
  timeout --signal=TERM --kill-after=120s "$limit" bin/mesh-bench "$name" "${common[@]}" "$@" "${extra[@]}" >/dev/null &
  bench_pid=$!
  wait "$bench_pid"
  local rc=$?
  set -e
  bench_pid=
  if [ "$rc" != 0 ]; then
    log "scenario $name FAILED (exit $rc)"
    failed+=("$name")
  fi
}

for scenario in $SCENARIOS; do
  case $scenario in
    capacity) run capacity 40m --from "$RAMP_FROM" --step "$RAMP_STEP" --max "$RAMP_MAX" --step-duration "$STEP" ;;
    sustained) run sustained 40m --rate "$RATE" --duration "$DURATION" ;;
    burst) run burst 20m --jobs "$BURST_JOBS" ;;
    memory) run memory 40m --jobs "$MEMORY_JOBS" ;;
    *) log "unknown scenario $scenario"; failed+=("$scenario") ;;
  esac
done
printf '\nLoad average after: %s.\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$REPORT"

log "report: $REPORT (profiles and service logs under $BENCH_OUT/work)"
grep -E '\*\*(met|missed)\*\*' "$REPORT" | sed 's/\*\*//g' >&2 || true
if [ "${#failed[@]}" -gt 0 ]; then
  log "failed scenarios: ${failed[*]}"
  exit 1
fi
