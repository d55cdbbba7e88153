#!/usr/bin/env bash
# Make sure the services idem's tests use are running on 127.0.0.1: PostgreSQL (5432),
# Redis (6379), NATS with JetStream (4222), RabbitMQ (5672) and MariaDB (3306); and that
# redis-server and redis-cli are installed for the Redis Cluster tests, which start
# their own nodes on free ports. Each one that is down is
# started, after installing it with apt-get if it is missing. Idempotent: safe to run
# again at any time. Exits non-zero naming the service that could not be brought up.
#
# It says what it is about to do before doing it: one line per package it installs
# and per service it starts or reconfigures (MariaDB's root password reset to empty
# for TCP logins, the test databases created). Unattended: apt-get runs with -y and
# no questions; without root it uses sudo, which asks for a password only when run
# from a terminal (in CI, passwordless sudo or root, else a clear error).
set -uo pipefail

log() { printf 'services: %s\n' "$*" >&2; }

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_up() { # port seconds
  local i
  for ((i = 0; i < $2 * 4; i++)); do up "$1" && return 0; sleep 0.25; done
  return 1
}

# as_root runs a command as root: directly, with passwordless sudo, or with sudo
# asking for a password when there is a terminal to ask on; never a hidden prompt.
as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif sudo -n true 2>/dev/null; then
    sudo -n "$@"
  elif [ -t 0 ] && command -v sudo >/dev/null 2>&1; then
    log "sudo $1: needs root; sudo asks for your password"
    sudo "$@"
  else
    log "ERROR: $1 needs root: run as root or with passwordless sudo"
    return 1
  fi
}

apt_updated=
need() { # command package...
  command -v "$1" >/dev/null 2>&1 && return 0
  [ -x "$1" ] && return 0
  log "installing ${*:2} with apt-get (missing: $(basename "$1"))"
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq >/dev/null && apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${@:2}" >/dev/null
}

start_postgres() {
  need pg_ctlcluster postgresql postgresql-contrib || return 1
  # The CDC tests and `idem verify --relay cdc` initdb private clusters (wal_level=logical)
  # with the server binaries, which a client-only install lacks.
  need "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)" postgresql postgresql-contrib || return 1
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] || { log "no PostgreSQL cluster in /etc/postgresql"; return 1; }
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_up 5432 30 || return 1
  # Trust auth for local TCP is the machine's default; make sure the test database exists.
  psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" 2>/dev/null | grep -q 1 || {
    log "postgres: creating the database test"
    psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null 2>&1 || true
  }
}

start_redis() {
  need redis-server redis-server || return 1
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  wait_up 6379 15
}

start_nats() {
  need /usr/sbin/nats-server nats-server || return 1
  as_root mkdir -p /var/lib/nats-server
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server
  wait_up 4222 15
}

start_rabbitmq() {
  need rabbitmq-server rabbitmq-server || return 1
  as_root rabbitmq-server -detached >/dev/null 2>&1 || true
  wait_up 5672 90
}

start_mysql() {
  need mariadbd mariadb-server || return 1
  as_root /etc/init.d/mariadb start >/dev/null 2>&1 || true
  wait_up 3306 60
}

# The tests connect as root with an empty password over TCP to the database test.
mysql_ready() {
  mariadb -h 127.0.0.1 -u root -e "CREATE DATABASE IF NOT EXISTS test" 2>/dev/null && return 0
  # A fresh install lets root in through the socket only: allow TCP without a password.
  log "mysql: root cannot log in over TCP; resetting MariaDB's root@localhost to an empty password (mysql_native_password) and creating the database test"
  as_root mariadb -u root -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); CREATE DATABASE IF NOT EXISTS test" 2>/dev/null &&
    mariadb -h 127.0.0.1 -u root -e "SELECT 1" >/dev/null 2>&1
}

log "checking PostgreSQL, Redis, NATS, RabbitMQ and MariaDB on 127.0.0.1; each one down is installed with apt-get if missing, then started"
status=0
for svc in postgres:5432 redis:6379 nats:4222 rabbitmq:5672 mysql:3306; do
  name=${svc%%:*} port=${svc##*:}
  if up "$port"; then
    log "$name up on 127.0.0.1:$port"
    continue
  fi
  log "$name down on 127.0.0.1:$port; starting it"
  if "start_$name" && up "$port"; then
    log "$name started on 127.0.0.1:$port"
  else
    log "ERROR: could not start $name on 127.0.0.1:$port"
    status=1
  fi
done

if up 3306 && ! mysql_ready; then
  log "ERROR: MariaDB is up but root cannot log in over TCP to create the database test"
  status=1
fi

# The Redis Cluster tests (idemredis) start their own six redis-server processes
# (internal/testsvc/rediscluster.go) and form the cluster with redis-cli; they need
# both binaries, Redis 7.0 or later.
if need redis-server redis-server && need redis-cli redis-tools &&
  redis-server --version | grep -Eq 'v=([7-9]|[1-9][0-9])\.'; then
  log "redis-server and redis-cli present for the Redis Cluster tests"
else
  log "ERROR: the Redis Cluster tests need redis-server and redis-cli 7.0 or later"
  status=1
fi

# Headless Chromium for stream's browser test (Debian's package).
if [ -x /usr/bin/chromium ]; then
  log "chromium present"
elif need /usr/bin/chromium chromium && [ -x /usr/bin/chromium ]; then
  log "chromium installed"
else
  log "ERROR: could not install chromium (the browser test needs /usr/bin/chromium)"
  status=1
fi

# PgBouncer for the transaction-pooling tests (testsvc.PgBouncer starts a private one
# per test on a free port; it is not run as a service here).
if [ -x /usr/sbin/pgbouncer ]; then
  log "pgbouncer present"
elif need /usr/sbin/pgbouncer pgbouncer && [ -x /usr/sbin/pgbouncer ]; then
  log "pgbouncer installed"
else
  log "ERROR: could not install pgbouncer (the PgBouncer tests need /usr/sbin/pgbouncer)"
  status=1
fi

# A private MariaDB (mariadb-install-db + mariadbd in a temporary directory) for
# `idem verify --db mysql:` and the database-crash tests (internal/mariadbproc).
if need mariadb-install-db mariadb-server && { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }; then
  log "mariadb server binaries present"
else
  log "ERROR: could not install mariadb-server (the database-crash tests need mariadb-install-db and mariadbd)"
  status=1
fi
exit $status
