#!/usr/bin/env bash
# Benchmarks the alerting service (`make bench` runs it after the registry
# benchmark): starts bin/alerting on a spare port with its own schema,
# execution event exchange and queue, runs bin/alerting-bench against it
# (100,000 jobs watched, 10,000 events/s for 60 s in the dispatcher's mix:
# an outcome per slot, a STARTED before it for 1 % of them, the attempts
# slower than --started-event-after; BENCH_ALERTING_ARGS="--slow-share 1"
# gives the mix before ADR 0021, a STARTED for every one), stops it, drops the
# schema, the queues and the exchanges, and prints where the report is.
# The whole run holds /tmp/cronmesh-bench.lock, so benchmarks never overlap.
#
# Environment:
#   BENCH_OUT          report directory (default bin/bench/<UTC time>)
#   BENCH_PORT         alerting port (default: a free one from 18500)
#   BENCH_ALERTING_ARGS extra flags for alerting-bench, e.g. "--rate 5000" or
#                       "--slow-share 1"
#
# Exit status: non-zero when the run fails (the service dies, a publish
# fails); a missed speed target is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${CRONMESH_BENCH_LOCKED:-}" ]; then
  export CRONMESH_BENCH_LOCKED=1
  exec flock -o /tmp/cronmesh-bench.lock "$0" "$@"
fi

BENCH_OUT=${BENCH_OUT:-bin/bench/$(date -u +%Y%m%dT%H%M%SZ)}
BENCH_ALERTING_ARGS=${BENCH_ALERTING_ARGS:-}
PG_URL=${CRONMESH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable}
AMQP_URL=${CRONMESH_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}

BENCH_NAME=bench-alerting
# shellcheck source=deploy/local/bench-lib.sh
. deploy/local/bench-lib.sh

pick_port 18500 18599
build_bench alerting

mkdir -p "$BENCH_OUT"
REPORT=$BENCH_OUT/alerting.md
LOG=$BENCH_OUT/alerting.log
RUN=$(date -u +%Y%m%d%H%M%S)_$$
SCHEMA=bench_alerting_$RUN
EXEC_EXCHANGE=cronmesh.executions.bench_$RUN
EXEC_QUEUE=cronmesh.alerting.executions.bench_$RUN
JOBS_EXCHANGE=cronmesh.jobs.bench_$RUN
JOBS_QUEUE=cronmesh.alerting.jobs.bench_$RUN
export CRONMESH_API_KEY=bench_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
URL=http://127.0.0.1:$BENCH_PORT

pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; wait "$pid" 2>/dev/null || true
  fi
  psql "$PG_URL" -qc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || log "could not drop schema $SCHEMA"
  bin/alerting-bench --cleanup \
    --amqp-url "$AMQP_URL" --queue "$EXEC_QUEUE,$JOBS_QUEUE" --exchange "$EXEC_EXCHANGE,$JOBS_EXCHANGE" --schema "$SCHEMA" \
    >/dev/null 2>&1 || log "could not delete the run's queues and exchanges"
}
trap cleanup EXIT

log "starting alerting on $URL (schema $SCHEMA)"
# A benchmark measures capacity, not the rate limit.
CRONMESH_API_KEYS="bench=$CRONMESH_API_KEY" CRONMESH_RATE_LIMIT=off CRONMESH_REGISTRY_URL= bin/alerting serve --listen "127.0.0.1:$BENCH_PORT" \
  --postgres-url "$PG_URL" --amqp-url "$AMQP_URL" --schema "$SCHEMA" \
  --executions-exchange "$EXEC_EXCHANGE" --executions-queue "$EXEC_QUEUE" \
  --jobs-exchange "$JOBS_EXCHANGE" --jobs-queue "$JOBS_QUEUE" --log-level warn >"$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  if curl -fsS "$URL/readyz" >/dev/null 2>&1; then break; fi
  kill -0 "$pid" 2>/dev/null || die "alerting exited; see $LOG"
  sleep 0.2
done
curl -fsS "$URL/readyz" >/dev/null || die "alerting not ready; see $LOG"

# shellcheck disable=SC2086
bin/alerting-bench --postgres-url "$PG_URL" --amqp-url "$AMQP_URL" --schema "$SCHEMA" \
  --exchange "$EXEC_EXCHANGE" --queue "$EXEC_QUEUE" --api-url "$URL" --alerting-pid "$pid" \
  --out "$REPORT" $BENCH_ALERTING_ARGS
kill -0 "$pid" 2>/dev/null || die "alerting died during the run; see $LOG"
log "report: $REPORT"
