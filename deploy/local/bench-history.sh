#!/usr/bin/env bash
# Benchmarks the history service (part of `make bench`): in a schema,
# exchange and queue of its own, bulk-loads BENCH_HISTORY_EXECUTIONS
# executions over 30 days (history-bench load, COPY), starts bin/history on
# them, measures ListExecutions for one job and a day and text searches
# over a day through the API, then publishes BENCH_HISTORY_EVENTS lifecycle
# events in batches of 100 in the dispatcher's mix (a SUCCEEDED per
# execution, a STARTED before it for 1 % of them: the attempts slower than
# --started-event-after; CRONMESH_SLOW_SHARE=1 gives the mix before ADR
# 0021, a STARTED for every one) and measures the events and the
# executions committed per second.
# Drops the schema, queue and exchange afterwards (10,000,000 executions
# take several GB). Runs under flock /tmp/cronmesh-bench.lock, so it never
# overlaps another benchmark that takes the lock.
#
# Environment:
#   BENCH_HISTORY_EXECUTIONS  executions to load (default 10000000)
#   BENCH_HISTORY_EVENTS      events to ingest (default 1000000)
#   BENCH_OUT                 report directory (default bin/bench/<UTC time>)
#   BENCH_PORT                history port (default: a free one from 18400)
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${BENCH_LOCKED:-}" ]; then
  echo "bench-history: waiting for /tmp/cronmesh-bench.lock" >&2
  exec env BENCH_LOCKED=1 flock -o /tmp/cronmesh-bench.lock "$0" "$@"
fi

EXECUTIONS=${BENCH_HISTORY_EXECUTIONS:-10000000}
EVENTS=${BENCH_HISTORY_EVENTS:-1000000}
BENCH_OUT=${BENCH_OUT:-bin/bench/$(date -u +%Y%m%dT%H%M%SZ)}
BENCH_NAME=bench-history
# shellcheck source=deploy/local/bench-lib.sh
. deploy/local/bench-lib.sh

avail=$(df -BG --output=avail /work 2>/dev/null | tail -1 | tr -dc 0-9 || echo 0)
[ "${avail:-0}" -ge 15 ] || die "less than 15 GB free on /work (${avail} GB): the load needs several GB"

pick_port 18400 18499
build_bench history

mkdir -p "$BENCH_OUT"
REPORT=$BENCH_OUT/history.md
LOG=$BENCH_OUT/history.log
RUN=$(date -u +%Y%m%d%H%M%S)_$$
SCHEMA=bench_history_$RUN
EXCHANGE=cronmesh.executions.bench_$RUN
QUEUE=cronmesh.history.bench_$RUN
export CRONMESH_API_KEY=bench_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
URL=http://127.0.0.1:$BENCH_PORT
pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  bin/history-bench cleanup --schema "$SCHEMA" --exchange "$EXCHANGE" --queue "$QUEUE" ||
    log "cleanup failed: drop schema $SCHEMA, queue $QUEUE and exchange $EXCHANGE by hand"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

{
  printf '# History benchmark, %s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'Run by `%s` at commit %s%s.\n' \
    "BENCH_HISTORY_EXECUTIONS=$EXECUTIONS BENCH_HISTORY_EVENTS=$EVENTS deploy/local/bench-history.sh" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  printf 'Service: `bin/history serve --listen 127.0.0.1:%s --schema %s --executions-exchange %s --queue %s --log-level warn` (defaults otherwise: 16 ingest subscriptions, prefetch 4).\n' \
    "$BENCH_PORT" "$SCHEMA" "$EXCHANGE" "$QUEUE"
} >"$REPORT"

bin/history-bench machine --out "$REPORT"
log "migrating schema $SCHEMA"
bin/history migrate --schema "$SCHEMA" --log-level warn
log "loading $EXECUTIONS executions"
bin/history-bench load --schema "$SCHEMA" --executions "$EXECUTIONS" --out "$REPORT"

log "starting the history service on $URL"
# A benchmark measures capacity, not the rate limit.
CRONMESH_API_KEYS="bench=$CRONMESH_API_KEY" CRONMESH_RATE_LIMIT=off CRONMESH_REGISTRY_URL= bin/history serve --listen "127.0.0.1:$BENCH_PORT" --schema "$SCHEMA" \
  --executions-exchange "$EXCHANGE" --queue "$QUEUE" --log-level warn >"$LOG" 2>&1 &
pid=$!
for _ in $(seq 300); do
  curl -sf "$URL/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || die "the history service exited at start; see $LOG"
  sleep 0.2
done
curl -sf "$URL/readyz" >/dev/null || die "the history service is not ready after 60s; see $LOG"

log "queries"
bin/history-bench query --history-url "$URL" --executions "$EXECUTIONS" --out "$REPORT"
log "ingest of $EVENTS events"
bin/history-bench ingest --history-url "$URL" --exchange "$EXCHANGE" --events "$EVENTS" --out "$REPORT"

log "report: $REPORT"
grep -E '^- \*\*(MET|MISSED)\*\*' "$REPORT" | sed 's/\*\*//g' || true
