#!/usr/bin/env bash
# Benchmarks the dispatcher against the speed targets of its issue: builds
# bin/dispatcher and bin/dispatcher-bench, makes sure PostgreSQL and
# RabbitMQ run, then runs the scenarios one after the other. Each starts a
# dispatcher on a spare port with its own schema and broker names (tagged),
# a loopback HTTP target inside dispatcher-bench, and removes them at the
# end. The Markdown report is appended to $BENCH_OUT/report.md. Each
# scenario first measures the machine's ceilings (RabbitMQ publish+consume
# with confirms, batched PostgreSQL inserts; 15 s each) and reports its
# rate as a share of them.
#
#   throughput  100,000 requests queued, then delivered as fast as possible
#   latency     1,000 requests/s for 60 s to a running dispatcher
#
# Every scenario runs under flock /tmp/cronmesh-bench.lock, so benchmarks on
# a shared machine never overlap.
#
# Environment:
#   BENCH_DISPATCHER_SCENARIOS  subset and order (default: throughput latency)
#   BENCH_DISPATCHER_N          throughput requests (default 100000)
#   BENCH_DISPATCHER_PACK       throughput requests per broker message, packed
#                               as the trigger's relay packs a burst (default 64;
#                               1: one request a message)
#   BENCH_DISPATCHER_RATE       latency requests/s (default 1000)
#   BENCH_DISPATCHER_DURATION   latency duration (default 60s)
#   BENCH_DISPATCHER_ARGS       extra dispatcher flags, e.g. "--prefetch 16"
#   BENCH_OUT                   report directory (default bin/bench/dispatcher-<UTC time>)
#
# Exit status: non-zero when a scenario cannot run; a missed target is
# reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

BENCH_DISPATCHER_SCENARIOS=${BENCH_DISPATCHER_SCENARIOS:-throughput latency}
BENCH_DISPATCHER_N=${BENCH_DISPATCHER_N:-100000}
BENCH_DISPATCHER_PACK=${BENCH_DISPATCHER_PACK:-64}
BENCH_DISPATCHER_RATE=${BENCH_DISPATCHER_RATE:-1000}
BENCH_DISPATCHER_DURATION=${BENCH_DISPATCHER_DURATION:-60s}
BENCH_DISPATCHER_ARGS=${BENCH_DISPATCHER_ARGS:-}
BENCH_OUT=${BENCH_OUT:-bin/bench/dispatcher-$(date -u +%Y%m%dT%H%M%SZ)}

log() { printf 'bench-dispatcher: %s\n' "$*" >&2; }

log "building bin/dispatcher and bin/dispatcher-bench"
go build -o bin/dispatcher ./services/dispatcher/cmd/dispatcher
go build -o bin/dispatcher-bench ./bench/cmd/dispatcher
deploy/local/ensure-services.sh

mkdir -p "$BENCH_OUT"
REPORT=$BENCH_OUT/report.md
{
  printf '# Dispatcher benchmark, %s\n\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf 'Commit %s%s. Scenarios: %s. Dispatcher flags: `%s`.\n' "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "$(git diff --quiet 2>/dev/null || echo ' (with local changes)')" "$BENCH_DISPATCHER_SCENARIOS" "${BENCH_DISPATCHER_ARGS:-defaults}"
} >>"$REPORT"

failed=()
for scenario in $BENCH_DISPATCHER_SCENARIOS; do
  log "scenario $scenario (waiting for the bench lock)"
  if ! flock -o /tmp/cronmesh-bench.lock timeout --signal=TERM --kill-after=30s 15m \
    bin/dispatcher-bench --scenario "$scenario" --dispatcher bin/dispatcher \
    --dispatcher-args "$BENCH_DISPATCHER_ARGS" --n "$BENCH_DISPATCHER_N" --pack "$BENCH_DISPATCHER_PACK" \
    --rate "$BENCH_DISPATCHER_RATE" --duration "$BENCH_DISPATCHER_DURATION" \
    --tag "dbench$$" --log-dir "$BENCH_OUT" --out "$REPORT"; then
    log "scenario $scenario FAILED"
    failed+=("$scenario")
  fi
done

log "report: $REPORT"
grep -E '(target .*: (met|missed))' "$REPORT" | sed 's/^/  /' || true
if [ "${#failed[@]}" -gt 0 ]; then
  log "failed scenarios: ${failed[*]}"
  exit 1
fi
