#!/usr/bin/env bash
# Makes sure the local PostgreSQL and RabbitMQ are running, starting them (or,
# as root, installing them with apt) when they are not, gives PostgreSQL the
# settings the mesh needs (max_connections, autovacuum, max_wal_size) and
# creates the `cronmesh` database. Idempotent: a second run changes nothing.
set -euo pipefail

PG_HOST=127.0.0.1 PG_PORT=5432 AMQP_PORT=5672
log() { printf 'services: %s\n' "$*"; }
die() { printf 'services: %s\n' "$*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  for ((i = 0; i < secs * 4; i++)); do "$@" && return 0; sleep 0.25; done
  die "$name did not come up within ${secs}s"
}
apt_install() {
  [ "$(id -u)" = 0 ] || die "$1 is not installed; install it (Debian: apt-get install -y $2) and run again"
  log "installing $2 with apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null
}

# --- PostgreSQL -------------------------------------------------------------
pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; }
if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
  apt_install PostgreSQL postgresql
  # The project expects trust auth on loopback, as on the development machines.
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf | head -n1)
  sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
fi
if ! pg_ready; then
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  log "starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for PostgreSQL 60 pg_ready
fi
psql_admin() { psql -X -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
# `make test` runs several whole meshes at once (the end-to-end suites side
# by side, two meshes of each at a time), each holding a few dozen
# connections: PostgreSQL's default of 100 runs out. Raised once, with a
# restart, and kept in postgresql.auto.conf.
PG_MIN_CONNECTIONS=400
if [ "$(psql_admin -tAc 'SHOW max_connections')" -lt "$PG_MIN_CONNECTIONS" ]; then
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  log "raising PostgreSQL's max_connections to $PG_MIN_CONNECTIONS (a restart)"
  psql_admin -c "ALTER SYSTEM SET max_connections = $PG_MIN_CONNECTIONS"
  pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  wait_for PostgreSQL 60 pg_ready
fi
# Two settings the mesh's write rate needs (docs/deploy.md, "The PostgreSQL
# you run"), applied together with one reload and kept in
# postgresql.auto.conf, which overrides the server's other files:
# - autovacuum, PostgreSQL's default: the busiest tables churn row versions
#   at the execution rate (the trigger's schedule rows and outbox, the
#   alerting service's job rows) and stay small only through it;
# - max_wal_size of at least 4 GB: at thousands of executions a second the
#   default 1 GB brings a checkpoint every 35-60 s, and the first change to
#   every page after each one writes the whole page to the WAL.
PG_MIN_WAL_MB=4096
settings=()
if [ "$(psql_admin -tAc 'SHOW autovacuum')" != on ]; then
  settings+=(-c "ALTER SYSTEM SET autovacuum = on")
fi
if [ "$(psql_admin -tAc "SELECT setting FROM pg_settings WHERE name = 'max_wal_size'")" -lt "$PG_MIN_WAL_MB" ]; then
  settings+=(-c "ALTER SYSTEM SET max_wal_size = '${PG_MIN_WAL_MB}MB'")
fi
if [ ${#settings[@]} -gt 0 ]; then
  log "setting PostgreSQL's autovacuum on and max_wal_size to at least $PG_MIN_WAL_MB MB (a reload)"
  psql_admin "${settings[@]}" -c "SELECT pg_reload_conf()" >/dev/null
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'cronmesh'")" != 1 ]; then
  log "creating database cronmesh"
  psql_admin -c 'CREATE DATABASE cronmesh' || [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'cronmesh'")" = 1 ]
fi

# --- RabbitMQ ---------------------------------------------------------------
command -v rabbitmq-server >/dev/null || apt_install RabbitMQ rabbitmq-server
if ! port_open "$AMQP_PORT"; then
  log "starting RabbitMQ"
  rabbitmq-server -detached || true
  wait_for RabbitMQ 120 port_open "$AMQP_PORT"
fi
log "PostgreSQL on $PG_HOST:$PG_PORT and RabbitMQ on 127.0.0.1:$AMQP_PORT are up"
