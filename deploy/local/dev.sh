#!/usr/bin/env bash
# Runs the cronmesh mesh on this machine against the local PostgreSQL and
# RabbitMQ (`make dev` starts those first): an embedded etcd, the registry and
# two trigger nodes. Ctrl-C stops everything cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."

# A development key, printed below: never use it outside this machine.
DEV_KEY=${CRONMESH_DEV_API_KEY:-cm_dev_0000000000000000}
export CRONMESH_API_KEYS=${CRONMESH_API_KEYS:-dev=$DEV_KEY}
export CRONMESH_ETCD_ENDPOINTS=${CRONMESH_ETCD_ENDPOINTS:-127.0.0.1:2379}
LOGS=.dev/logs
mkdir -p "$LOGS"

pids=()
stop_all() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "stopped"
  exit 0
}
trap stop_all INT TERM EXIT

start() { # name, command...
  local name=$1; shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  pids+=($!)
}
wait_ready() { # name, url
  for ((i = 0; i < 240; i++)); do
    curl -fsS "$2" >/dev/null 2>&1 && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "$1 exited; see $LOGS/$1.log"; tail -n 20 "$LOGS/$1.log"; exit 1; }
    sleep 0.25
  done
  echo "$1 did not become ready; see $LOGS/$1.log"; exit 1
}

start etcd bin/devetcd --listen "$CRONMESH_ETCD_ENDPOINTS" --data-dir .dev/etcd
start registry bin/registry serve --listen 127.0.0.1:8081
wait_ready registry http://127.0.0.1:8081/readyz
start trigger-1 bin/trigger --listen 127.0.0.1:8082 --node-id trigger-1
start trigger-2 bin/trigger --listen 127.0.0.1:8182 --node-id trigger-2
wait_ready trigger-1 http://127.0.0.1:8082/readyz
wait_ready trigger-2 http://127.0.0.1:8182/readyz
# Local targets are on loopback, which the SSRF guard refuses by default.
start dispatcher bin/dispatcher --listen 127.0.0.1:8083 --allow-networks 127.0.0.0/8,::1/128
wait_ready dispatcher http://127.0.0.1:8083/readyz
start history bin/history serve --listen 127.0.0.1:8084
wait_ready history http://127.0.0.1:8084/readyz
# Alerting needs no SMTP server to start: email channels name their own
# server when they are created (TestChannel tries one).
start alerting bin/alerting serve --listen 127.0.0.1:8085 --allow-networks 127.0.0.0/8,::1/128
wait_ready alerting http://127.0.0.1:8085/readyz

cat <<BANNER

  cronmesh (development)            logs in $LOGS/
  registry    http://127.0.0.1:8081   cronmesh.registry.v1.JobService
  trigger-1   http://127.0.0.1:8082   cronmesh.trigger.v1.TriggerService
  trigger-2   http://127.0.0.1:8182   cronmesh.trigger.v1.TriggerService
  dispatcher  http://127.0.0.1:8083   cronmesh.dispatcher.v1.DispatchService
  history     http://127.0.0.1:8084   cronmesh.history.v1.HistoryService
  alerting    http://127.0.0.1:8085   cronmesh.alerting.v1.AlertService
  etcd        http://$CRONMESH_ETCD_ENDPOINTS (embedded)
  metrics     /metrics on every service
  API key     $DEV_KEY   (namespace "dev")

  The dispatcher delivers to webhooks and queues, retries through the
  cronmesh.retry.* delay queues and keeps dead letters (DispatchService).

  Try:
    bin/grpcurl -plaintext 127.0.0.1:8081 list
    bin/grpcurl -plaintext -H "Authorization: Bearer $DEV_KEY" 127.0.0.1:8082 cronmesh.trigger.v1.TriggerService/GetRing
    bin/grpcurl -plaintext -H "Authorization: Bearer $DEV_KEY" 127.0.0.1:8084 cronmesh.history.v1.HistoryService/ListExecutions

  Ctrl-C stops everything.
BANNER
wait -n "${pids[@]}" || true
echo "a service exited unexpectedly; see $LOGS/"
exit 1
