#!/usr/bin/env bash
# Benchmarks the trigger tier against the targets of its issue: builds
# bin/trigger and bin/trigger-bench, makes sure PostgreSQL and RabbitMQ run,
# then runs the scenarios of bin/trigger-bench one after the other. Each
# scenario starts its own embedded etcd and trigger processes on its own
# schema, etcd prefix and broker names, and removes them at the end (a run
# that dies is cleaned up here by its tag). The Markdown report is appended
# to $BENCH_OUT/report.md. sustained, steady and burst first measure the
# machine's ceilings (RabbitMQ publish+consume with confirms, batched
# PostgreSQL inserts; 15 s each) and report their rate as a share of them.
#
#   sustained  5,000 every-second jobs, 60 s measured    (about 2 min); all
#              5,000 slots fall on the same instant of each second
#   steady     the same with a 1 s spread window: 5,000 slots/s spread
#              evenly over each second (the steady state)  (about 2 min)
#   burst      100,000 at-jobs due on the same second    (about 2 min)
#   failover   2 nodes, 1,000 jobs, SIGKILL of one       (about 1 min)
#   projection 200,000 CREATED job events queued, then one node started:
#              time until all are in the schema          (about 1 min)
#   memory     5,000,000 scheduled jobs, one node, 60 s  (about 3 min; 2 GB
#              of disk while it runs; BENCH_TRIGGER_MEMORY=0 skips it)
#
# Environment:
#   BENCH_TRIGGER_SCENARIOS   subset and order (default: sustained steady burst
#                             failover projection memory)
#   BENCH_TRIGGER_MEMORY      0 leaves the memory scenario out of the default
#   BENCH_SUSTAINED_JOBS      default 5000
#   BENCH_SUSTAINED_DURATION  default 60s (10m for the long run)
#   BENCH_BURST_JOBS          default 100000
#   BENCH_FAILOVER_JOBS       default 1000
#   BENCH_PROJECTION_JOBS     default 200000
#   BENCH_MEMORY_JOBS         default 5000000
#   BENCH_PROFILE             1 saves CPU and heap profiles of the nodes under
#                             $BENCH_OUT/profiles and their `go tool pprof -top`
#   BENCH_WAIT_QUIET          how long each scenario waits for other benchmarks
#                             (registry-bench, go test) to finish (default 300s)
#   BENCH_OUT                 report directory (default bin/bench/trigger-<UTC time>)
#   BENCH_ARGS                extra flags for every scenario, e.g. "--nodes 2"
#
# Exit status: non-zero when a scenario cannot run (a node dies, loading
# fails, ...); a missed target is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

# The whole run holds /tmp/cronmesh-bench.lock, so benchmarks never overlap
# (flock -o: a server started meanwhile does not inherit the lock).
if [ -z "${CRONMESH_BENCH_LOCKED:-}" ]; then
  export CRONMESH_BENCH_LOCKED=1
  exec flock -o /tmp/cronmesh-bench.lock "$0" "$@"
fi

BENCH_TRIGGER_MEMORY=${BENCH_TRIGGER_MEMORY:-1}
default_scenarios="sustained steady burst failover projection"
[ "$BENCH_TRIGGER_MEMORY" = 0 ] || default_scenarios="$default_scenarios memory"
BENCH_TRIGGER_SCENARIOS=${BENCH_TRIGGER_SCENARIOS:-$default_scenarios}
BENCH_SUSTAINED_JOBS=${BENCH_SUSTAINED_JOBS:-5000}
BENCH_SUSTAINED_DURATION=${BENCH_SUSTAINED_DURATION:-60s}
BENCH_BURST_JOBS=${BENCH_BURST_JOBS:-100000}
BENCH_FAILOVER_JOBS=${BENCH_FAILOVER_JOBS:-1000}
BENCH_PROJECTION_JOBS=${BENCH_PROJECTION_JOBS:-200000}
BENCH_MEMORY_JOBS=${BENCH_MEMORY_JOBS:-5000000}
BENCH_PROFILE=${BENCH_PROFILE:-0}
BENCH_WAIT_QUIET=${BENCH_WAIT_QUIET:-300s}
BENCH_OUT=${BENCH_OUT:-bin/bench/trigger-$(date -u +%Y%m%dT%H%M%SZ)}
BENCH_ARGS=${BENCH_ARGS:-}

log() { printf 'bench-trigger: %s\n' "$*" >&2; }

log "building bin/trigger and bin/trigger-bench"
go build -o bin/trigger ./services/trigger/cmd/trigger
go build -o bin/trigger-bench ./bench/cmd/trigger
deploy/local/ensure-services.sh

mkdir -p "$BENCH_OUT"
REPORT=$BENCH_OUT/report.md
# Every name this script's runs create carries the tag, so the cleanup below
# removes exactly their leftovers and never another run's.
TAG=s$$
# Temporary files (etcd data, node logs) of the runs live here.
export TMPDIR=$BENCH_OUT/tmp
mkdir -p "$TMPDIR"
common=(--tag "$TAG" --out "$REPORT" --wait-quiet "$BENCH_WAIT_QUIET")
if [ "$BENCH_PROFILE" = 1 ]; then
  common+=(--profile-dir "$BENCH_OUT/profiles")
fi
# shellcheck disable=SC2206 # BENCH_ARGS is split on purpose
extra=($BENCH_ARGS)

bench_pid=
failed=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    # trigger-bench stops its nodes and drops its schema on SIGTERM.
    kill -TERM "$bench_pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$bench_pid" 2>/dev/null || true # its nodes die with it (PDEATHSIG)
    wait "$bench_pid" 2>/dev/null || true
  fi
  bin/trigger-bench cleanup --tag "$TAG" 2>&1 | sed 's/^/bench-trigger: /' >&2 ||
    log "cleanup failed: drop schemas tbench_${TAG}_* and delete queues/exchanges tbench_${TAG}_* by hand"
  rm -rf "$TMPDIR"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# run NAME TIMEOUT ARGS...: one scenario, bounded in time.
run() {
  local name=$1 limit=$2
  shift 2
  log "scenario $name (at most $limit)"
  set +e
  timeout --signal=TERM --kill-after=60s "$limit" bin/trigger-bench "$name" "${common[@]}" "$@" "${extra[@]}" &
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

{
  printf '# Trigger benchmark, %s\n\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf 'Commit %s%s. Scenarios: %s.\n' "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "$(git diff --quiet 2>/dev/null || echo ' (with local changes)')" "$BENCH_TRIGGER_SCENARIOS"
} >>"$REPORT"

for scenario in $BENCH_TRIGGER_SCENARIOS; do
  case $scenario in
    sustained) run sustained 20m --jobs "$BENCH_SUSTAINED_JOBS" --duration "$BENCH_SUSTAINED_DURATION" ;;
    steady) run sustained 20m --jobs "$BENCH_SUSTAINED_JOBS" --duration "$BENCH_SUSTAINED_DURATION" --spread 1s ;;
    burst) run burst 20m --jobs "$BENCH_BURST_JOBS" --load-rate 1000 ;;
    failover) run failover 15m --jobs "$BENCH_FAILOVER_JOBS" ;;
    projection) run projection 20m --backlog --jobs "$BENCH_PROJECTION_JOBS" ;;
    memory) run memory 40m --jobs "$BENCH_MEMORY_JOBS" ;;
    *) log "unknown scenario $scenario"; failed+=("$scenario") ;;
  esac
done

if [ "$BENCH_PROFILE" = 1 ] && [ -d "$BENCH_OUT/profiles" ]; then
  for f in "$BENCH_OUT"/profiles/*.pprof; do
    [ -e "$f" ] || continue
    case $f in
      *-heap.pprof) go tool pprof -top -sample_index=inuse_space "$f" >"${f%.pprof}.txt" 2>/dev/null || true ;;
      *) go tool pprof -top "$f" >"${f%.pprof}.txt" 2>/dev/null || true ;;
    esac
  done
  log "profiles and their top lists: $BENCH_OUT/profiles"
fi

log "report: $REPORT"
if [ "${#failed[@]}" -gt 0 ]; then
  log "failed scenarios: ${failed[*]}"
  exit 1
fi
