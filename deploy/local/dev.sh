#!/usr/bin/env bash
# Runs cronmesh on this machine against the local PostgreSQL and RabbitMQ
# (`make dev` starts those first). Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."

# A development key, printed below: never use it outside this machine.
DEV_KEY=${CRONMESH_DEV_API_KEY:-cm_dev_0000000000000000}
export CRONMESH_API_KEYS=${CRONMESH_API_KEYS:-dev=$DEV_KEY}
export CRONMESH_LISTEN=${CRONMESH_LISTEN:-127.0.0.1:8081}

cat <<BANNER

  cronmesh (development)
  registry   http://$CRONMESH_LISTEN   cronmesh.registry.v1.JobService (Connect, gRPC, gRPC-Web)
  metrics    http://$CRONMESH_LISTEN/metrics
  API key    $DEV_KEY   (namespace "dev")

  Try:
    bin/grpcurl -plaintext $CRONMESH_LISTEN list
    bin/buf curl --protocol grpc --http2-prior-knowledge -H "Authorization: Bearer $DEV_KEY" \\
      -d '{"schedule": {"cron": "0 9 * * 1-5", "timeZone": "Europe/Berlin"}, "count": 3}' \\
      http://$CRONMESH_LISTEN/cronmesh.registry.v1.JobService/PreviewSchedule

BANNER
exec bin/registry serve
