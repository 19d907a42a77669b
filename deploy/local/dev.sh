#!/usr/bin/env bash
# Runs the whole cronmesh mesh on this machine (`make dev`, which first
# starts PostgreSQL and RabbitMQ, builds bin/ and installs bin/buf and
# bin/grpcurl, which the banner below and the README's tour call): an
# embedded etcd, the registry, three trigger nodes, the dispatcher, history,
# alerting, the web console and devecho, a webhook target that logs what it receives. It
# creates a demo job that POSTs to devecho every 5 seconds (idempotently:
# a fixed request id, so a restart makes no second one), prints every
# endpoint and the development API key, and runs until Ctrl-C, which stops
# everything in reverse order and waits for each process to exit.
#
# Traces go over OTLP/gRPC to CRONMESH_OTLP_ENDPOINT when it is set;
# otherwise, when a `jaeger` binary (Jaeger v2, all-in-one) is on PATH, it
# is started (OTLP on 127.0.0.1:4317, UI on 127.0.0.1:16686) and every
# service sends to it; otherwise tracing is off and the banner says how to
# turn it on.
#
# Environment (all optional):
#   CRONMESH_POSTGRES_URL   database (default: the local `cronmesh` database)
#   CRONMESH_AMQP_URL       broker (default: the local RabbitMQ, guest/guest)
#   CRONMESH_OTLP_ENDPOINT  OTLP/gRPC collector, host:port
#   CRONMESH_TRACE_LINK_TEMPLATE  the history's trace link, {trace_id} replaced
#                           (default with tracing on: the Jaeger UI on 16686)
#   CRONMESH_DEV_API_KEY    the development key (default cm_dev_0000000000000000)
#   CRONMESH_DEV_DIR        logs, etcd data and the pids file (default .dev)
#
# Exit status: 0 after Ctrl-C (SIGINT) or SIGTERM; 1 when a port is taken, a
# binary is missing, a process fails to start or one exits on its own.
# (Started in the background by another script, it may have SIGINT ignored,
# which bash cannot trap: stop it with SIGTERM then.)
set -euo pipefail
cd "$(dirname "$0")/../.."

# A development key, printed below: never use it outside this machine. It is
# the bootstrap admin key of namespace "dev" (it creates the other keys:
# `bin/cronctl keys create`), and the key every service fetches the managed
# keys from the registry with.
DEV_KEY=${CRONMESH_DEV_API_KEY:-cm_dev_0000000000000000}
export CRONMESH_API_KEYS=dev=$DEV_KEY
export CRONMESH_REGISTRY_URL=http://127.0.0.1:8081
export CRONMESH_ETCD_ENDPOINTS=127.0.0.1:2379
DEV_DIR=${CRONMESH_DEV_DIR:-.dev}
LOGS=$DEV_DIR/logs
PG_URL=${CRONMESH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable}
ECHO_URL=http://127.0.0.1:8090
JAEGER_UI=http://127.0.0.1:16686
# Requests to the services never go through a proxy from the environment.
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

say() { printf 'dev: %s\n' "$*"; }
die() { printf 'dev: %s\n' "$*" >&2; exit 1; }

# --- before anything starts: binaries and ports ------------------------------
for bin in devetcd devecho registry trigger dispatcher history alerting console; do
  [ -x "bin/$bin" ] || die "bin/$bin is missing: run 'make dev' (it builds bin/ first) or 'make build'"
done

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=(2379:etcd 8081:registry 8082:trigger-1 8182:trigger-2 8282:trigger-3 8083:dispatcher 8084:history 8085:alerting 8080:console 8090:devecho)
tracing=off
if [ -n "${CRONMESH_OTLP_ENDPOINT:-}" ]; then
  tracing=endpoint
elif command -v jaeger >/dev/null; then
  tracing=jaeger
  ports+=(4317:jaeger-otlp 16686:jaeger-ui)
fi
taken=()
for entry in "${ports[@]}"; do
  port_taken "${entry%%:*}" && taken+=("127.0.0.1:${entry%%:*} (${entry#*:})")
done
if [ "${#taken[@]}" -gt 0 ]; then
  printf 'dev: these ports are already in use, so the mesh cannot start:\n' >&2
  printf 'dev:   %s\n' "${taken[@]}" >&2
  die "is another 'make dev' running? Stop it, or find the process with: ss -ltnp"
fi

mkdir -p "$LOGS"
# "name pid" of every process started, for whoever needs to check on them.
: >"$DEV_DIR/pids"

# --- process control ------------------------------------------------------
names=() pids=()
stopping=
stop_all() {
  local rc=${1:-0}
  [ -n "$stopping" ] && return
  stopping=1
  trap - INT TERM HUP EXIT
  [ "${#pids[@]}" -gt 0 ] && say "stopping..."
  # Reverse start order: the services before devecho and etcd, Jaeger last
  # so that it receives the services' final spans.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    local pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for ((t = 0; t < 100; t++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "${names[i]} did not stop within 20s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  [ "${#pids[@]}" -gt 0 ] && say "stopped"
  exit "$rc"
}
trap 'stop_all 0' INT TERM HUP
trap 'stop_all $?' EXIT

start() { # name, command...
  local name=$1; shift
  # Its own session: a Ctrl-C in the terminal reaches only this script,
  # which then stops the processes in order (etcd after the triggers that
  # hold leases in it, Jaeger after the services that send it spans).
  setsid "$@" >"$LOGS/$name.log" 2>&1 &
  names+=("$name") pids+=($!)
  echo "$name $!" >>"$DEV_DIR/pids"
}
pid_of() {
  for i in "${!names[@]}"; do [ "${names[i]}" = "$1" ] && { echo "${pids[i]}"; return; }; done
}
wait_ready() { # name, url
  local pid; pid=$(pid_of "$1")
  for ((i = 0; i < 240; i++)); do
    curl -fsS -o /dev/null "$2" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      printf 'dev: %s exited while starting; the end of %s:\n' "$1" "$LOGS/$1.log" >&2
      tail -n 20 "$LOGS/$1.log" >&2
      exit 1
    fi
    sleep 0.25
  done
  die "$1 was not ready after 60s; see $LOGS/$1.log"
}

# --- tracing --------------------------------------------------------------
case $tracing in
  jaeger)
    start jaeger jaeger
    wait_ready jaeger "$JAEGER_UI/"
    export CRONMESH_OTLP_ENDPOINT=127.0.0.1:4317
    ;;
  off)
    unset CRONMESH_OTLP_ENDPOINT
    ;;
esac
if [ "$tracing" != off ]; then
  TRACE_LINK=${CRONMESH_TRACE_LINK_TEMPLATE:-$JAEGER_UI/trace/{trace_id}}
fi

# --- the mesh -------------------------------------------------------------
start etcd bin/devetcd --listen "$CRONMESH_ETCD_ENDPOINTS" --data-dir "$DEV_DIR/etcd"
start devecho bin/devecho --listen 127.0.0.1:8090
wait_ready devecho "$ECHO_URL/readyz"
# The history starts later: the registry asks it only when RerunExecution
# is called.
start registry bin/registry serve --listen 127.0.0.1:8081 --history-url http://127.0.0.1:8084
wait_ready registry http://127.0.0.1:8081/readyz
start trigger-1 bin/trigger --listen 127.0.0.1:8082 --node-id trigger-1
start trigger-2 bin/trigger --listen 127.0.0.1:8182 --node-id trigger-2
start trigger-3 bin/trigger --listen 127.0.0.1:8282 --node-id trigger-3
wait_ready trigger-1 http://127.0.0.1:8082/readyz
wait_ready trigger-2 http://127.0.0.1:8182/readyz
wait_ready trigger-3 http://127.0.0.1:8282/readyz
# Local targets are on loopback, which the SSRF guard refuses by default.
start dispatcher bin/dispatcher --listen 127.0.0.1:8083 --allow-networks 127.0.0.0/8,::1/128
wait_ready dispatcher http://127.0.0.1:8083/readyz
if [ -n "${TRACE_LINK:-}" ]; then
  start history env CRONMESH_TRACE_LINK_TEMPLATE="$TRACE_LINK" bin/history serve --listen 127.0.0.1:8084
else
  start history bin/history serve --listen 127.0.0.1:8084
fi
wait_ready history http://127.0.0.1:8084/readyz
# Alerting needs no SMTP server to start: email channels name their own
# server when they are created (TestChannel tries one).
start alerting bin/alerting serve --listen 127.0.0.1:8085 --allow-networks 127.0.0.0/8,::1/128
wait_ready alerting http://127.0.0.1:8085/readyz
# The web console forwards to the services above on their default addresses.
start console bin/console --listen 127.0.0.1:8080
wait_ready console http://127.0.0.1:8080/readyz

# --- the demo job ---------------------------------------------------------
# Over the Connect protocol with curl, so that this needs no other tool.
# The fixed request id makes the call idempotent: a restart returns the job
# the first run created.
demo=$(curl -sS --fail-with-body -H "Authorization: Bearer $DEV_KEY" -H 'Content-Type: application/json' \
  -d '{"requestId": "dev-demo-job-v1", "job": {"displayName": "demo: every 5 seconds", "labels": {"demo": "dev"},
       "schedule": {"cron": "*/5 * * * * *"},
       "target": {"http": {"url": "'"$ECHO_URL"'/demo", "body": "{\"hello\": \"from cronmesh\"}"}}}}' \
  http://127.0.0.1:8081/cronmesh.registry.v1.JobService/CreateJob) || die "could not create the demo job: $demo"
DEMO_ID=$(grep -o '"id": *"[^"]*"' <<<"$demo" | head -n1 | sed 's/.*"\([^"]*\)"$/\1/')
[ -n "$DEMO_ID" ] || die "the demo job's id is not in the registry's answer: $demo"
# A restart finds the job as it was left: say so if someone paused it.
DEMO_STATE="POSTs to $ECHO_URL/demo"
grep -q '"paused": *true' <<<"$demo" && DEMO_STATE="is paused (JobService/ResumeJob starts it again)"

case $tracing in
  jaeger) TRACES="Jaeger UI $JAEGER_UI (jaeger on PATH; OTLP 127.0.0.1:4317); trace links: $TRACE_LINK" ;;
  endpoint) TRACES="OTLP to $CRONMESH_OTLP_ENDPOINT; trace links: $TRACE_LINK" ;;
  *) TRACES="off: run Jaeger (README.md, \"Traces\") and start with CRONMESH_OTLP_ENDPOINT=127.0.0.1:4317 make dev" ;;
esac
# The database URL without a password, should it hold one.
PG_SHOWN=$(sed -E 's#//([^:/@]*):[^@]*@#//\1:***@#' <<<"$PG_URL")

cat <<BANNER

  cronmesh (development) is up; logs in $LOGS/
  console      http://127.0.0.1:8080   the web console: sign in with the API key below
  registry     http://127.0.0.1:8081   cronmesh.registry.v1.JobService
  trigger-1    http://127.0.0.1:8082   cronmesh.trigger.v1.TriggerService
  trigger-2    http://127.0.0.1:8182   cronmesh.trigger.v1.TriggerService
  trigger-3    http://127.0.0.1:8282   cronmesh.trigger.v1.TriggerService
  dispatcher   http://127.0.0.1:8083   cronmesh.dispatcher.v1.DispatchService
  history      http://127.0.0.1:8084   cronmesh.history.v1.HistoryService
  alerting     http://127.0.0.1:8085   cronmesh.alerting.v1.AlertService
  echo target  $ECHO_URL   logs every request: tail -f $LOGS/devecho.log
  etcd         http://$CRONMESH_ETCD_ENDPOINTS   (embedded, data in $DEV_DIR/etcd)
  database     $PG_SHOWN
  traces       $TRACES
  metrics      /metrics on every service
  API key      $DEV_KEY   (namespace "dev", bootstrap admin; more keys: bin/cronctl keys create NAME --role viewer)

  Demo job "demo: every 5 seconds" ($DEMO_ID) $DEMO_STATE.
  Its history:
    bin/grpcurl -plaintext -H "Authorization: Bearer $DEV_KEY" -d '{"jobId": "$DEMO_ID", "pageSize": 3}' \\
      127.0.0.1:8084 cronmesh.history.v1.HistoryService/ListExecutions
    bin/buf curl --protocol grpc --http2-prior-knowledge -H "Authorization: Bearer $DEV_KEY" \\
      -d '{"jobId": "$DEMO_ID", "pageSize": 3}' http://127.0.0.1:8084/cronmesh.history.v1.HistoryService/ListExecutions

  The tour: README.md, "A five-minute tour". Ctrl-C stops everything.
BANNER

# Run until a signal (the trap) or until a process exits on its own.
set +e
wait -n "${pids[@]}"
set -e
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[i]}" 2>/dev/null; then
    printf 'dev: %s exited unexpectedly; the end of %s:\n' "${names[i]}" "$LOGS/${names[i]}.log" >&2
    tail -n 20 "$LOGS/${names[i]}.log" >&2
  fi
done
exit 1
