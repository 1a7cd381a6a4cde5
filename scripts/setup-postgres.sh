#!/usr/bin/env bash
# Starts a PostgreSQL server for merit's PostgreSQL tests and prints its connection URL as the
# last line of output.
#
# * Installs PostgreSQL (and psycopg2 for the Python test harness) from Debian packages when
#   they are absent. Needs root for that, as on the CI machine.
# * Creates a dedicated cluster `merit` listening on 127.0.0.1 only, on an unusual port
#   (MERIT_POSTGRES_PORT, default 55432), so it never collides with a system server on 5432.
# * Creates the role `merit` (LOGIN, CREATEDB, *not* a superuser: merit refuses superuser
#   connections because model-written SQL runs on them) and its database `merit`.
# * Locale C.UTF-8, so text sorts by code point as in SQLite (tests compare the two engines).
# * Idempotent: every step checks first, so running it again only makes sure it is running.
#
# Usage:  url=$(bash scripts/setup-postgres.sh | tail -n 1)
#         MERIT_TEST_POSTGRES_URL="$url" cargo test -p merit-interact
set -euo pipefail

PORT="${MERIT_POSTGRES_PORT:-55432}"
CLUSTER=merit
ROLE=merit
PASSWORD=merit # test-only credential for a server that listens on 127.0.0.1 only
DATABASE=merit

log() { echo "setup-postgres: $*" >&2; }

apt_install() {
    if [ "${APT_UPDATED:-0}" != 1 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

if ! command -v pg_createcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing PostgreSQL from Debian packages"
    apt_install postgresql
fi
# The harness runs the `python3` found on PATH, which may not be Debian's (pyenv, venv): try
# the Debian package first, then psycopg2-binary from PyPI for whichever python3 that is.
if ! python3 -c 'import psycopg2' >/dev/null 2>&1; then
    if [ "$(command -v python3)" = /usr/bin/python3 ]; then
        log "installing python3-psycopg2 for the Python test harness"
        apt_install python3-psycopg2 || true
    fi
fi
if ! python3 -c 'import psycopg2' >/dev/null 2>&1; then
    log "installing psycopg2-binary from PyPI for $(command -v python3)"
    python3 -m pip install --quiet psycopg2-binary >&2 ||
        python3 -m pip install --quiet --break-system-packages psycopg2-binary >&2 ||
        log "WARNING: psycopg2 could not be installed; Management tasks on PostgreSQL will fail with a harness error"
fi

# The newest installed major version.
VERSION=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
if [ -z "$VERSION" ]; then
    log "no PostgreSQL version found under /usr/lib/postgresql"
    exit 1
fi

if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$VERSION $CLUSTER"; then
    log "creating cluster $VERSION/$CLUSTER on 127.0.0.1:$PORT"
    pg_createcluster "$VERSION" "$CLUSTER" --port "$PORT" --locale C.UTF-8 >&2 -- --auth-host=scram-sha-256 --auth-local=peer
fi
CONF_DIR="/etc/postgresql/$VERSION/$CLUSTER"
# Loopback only, and the chosen port (also when the cluster already existed with another one).
sed -i -E "s/^#?listen_addresses\s*=.*/listen_addresses = '127.0.0.1'/" "$CONF_DIR/postgresql.conf"
sed -i -E "s/^#?port\s*=.*/port = $PORT/" "$CONF_DIR/postgresql.conf"

status=$(pg_lsclusters -h | awk -v v="$VERSION" -v c="$CLUSTER" '$1==v && $2==c {print $4}')
if [ "$status" != online ]; then
    log "starting cluster $VERSION/$CLUSTER"
    pg_ctlcluster "$VERSION" "$CLUSTER" start >&2
else
    # Picks up a changed port or listen address; harmless when nothing changed.
    pg_ctlcluster "$VERSION" "$CLUSTER" reload >&2 || true
fi

for _ in $(seq 1 60); do
    if pg_isready -q -h 127.0.0.1 -p "$PORT"; then break; fi
    sleep 0.5
done
pg_isready -h 127.0.0.1 -p "$PORT" >&2

psql_admin() { runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 --cluster "$VERSION/$CLUSTER" "$@"; }

if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
    log "creating role $ROLE"
    psql_admin -c "CREATE ROLE $ROLE LOGIN CREATEDB NOSUPERUSER NOCREATEROLE PASSWORD '$PASSWORD'"
else
    psql_admin -c "ALTER ROLE $ROLE LOGIN CREATEDB NOSUPERUSER NOCREATEROLE PASSWORD '$PASSWORD'"
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" != 1 ]; then
    log "creating database $DATABASE"
    psql_admin -c "CREATE DATABASE $DATABASE OWNER $ROLE"
fi

echo "postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DATABASE"
