#!/usr/bin/env bash
# A throwaway PostgreSQL for the test suite.
#
#   eval "$(bash .ci/postgres.sh start)"   # prints one line: export AGENTRY_TEST_POSTGRES_URL=...
#   bash .ci/postgres.sh stop
#
# `start` finds PostgreSQL's server binaries (PATH, then /usr/lib/postgresql/*/bin) or installs
# Debian's `postgresql` package, creates a fresh cluster (any old one is stopped and removed),
# listening on 127.0.0.1 only with trust authentication, starts it, creates the database
# `agentry_test` and prints the URL as a shell `export` line. Everything else goes to stderr, so
# the output can be eval'd. Running it again replaces the cluster. `stop` stops the cluster if
# it is running.
#
# Settings (environment):
#   AGENTRY_CI_PG_DIR   where the cluster lives (default: $HOME/.cache/agentry-ci/pg)
#   AGENTRY_CI_PG_PORT  the TCP port (default: 55432)
#
# PostgreSQL refuses to run as root. As root, the cluster belongs to the `postgres` system user
# (created if missing). That user must be able to reach the cluster's directory; root's home is
# usually private (mode 700), so when the default directory is out of its reach the cluster
# goes to /var/tmp/agentry-ci/pg instead of loosening the home directory's permissions.
set -euo pipefail

# Only the export line goes to stdout (fd 3); every command's output goes to stderr.
exec 3>&1 1>&2

log() { echo "postgres.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

PORT="${AGENTRY_CI_PG_PORT:-55432}"
DEFAULT_DIR="${HOME:-/root}/.cache/agentry-ci/pg"
FALLBACK_DIR=/var/tmp/agentry-ci/pg
DATABASE=agentry_test

[[ "$PORT" =~ ^[0-9]+$ ]] || die "AGENTRY_CI_PG_PORT must be a port number, not '$PORT'"

# The server's binaries: initdb and pg_ctl from PATH, else the newest Debian version directory.
find_bindir() {
    local candidate
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        # Through symlinks (Debian links some into /usr/bin or /usr/local/bin): createdb and
        # postgres live next to the real pg_ctl.
        candidate="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
        if [ -x "$candidate/initdb" ]; then
            echo "$candidate"
            return 0
        fi
    fi
    for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

install_postgres() {
    [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and only root can install it (apt-get install postgresql)"
    command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and there is no apt-get to install it"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache show postgresql >/dev/null 2>&1; then
        log "apt-get update (the package lists do not know postgresql yet)"
        apt-get update
    fi
    log "installing PostgreSQL from Debian's packages"
    if ! apt-get install -y --no-install-recommends postgresql; then
        # Stale package lists point at files the mirror no longer has.
        apt-get update
        apt-get install -y --no-install-recommends postgresql
    fi
}

# The account that owns and runs the cluster: the caller, or `postgres` when the caller is root.
RUN_AS=""
DB_USER="$(id -un)"
choose_user() {
    if [ "$(id -u)" -eq 0 ]; then
        if ! id postgres >/dev/null 2>&1; then
            log "creating the system user postgres"
            useradd --system --user-group --home-dir /nonexistent --no-create-home \
                --shell /usr/sbin/nologin postgres
        fi
        RUN_AS=postgres
        DB_USER=postgres
    fi
}

# Closes every descriptor above stderr, in a subshell about to start a command. A server that
# inherited one (the pipe of `$(bash .ci/postgres.sh start)`, a CI runner's log pipe) would hold
# it open for as long as it runs, and whoever reads that pipe would wait forever.
close_inherited_fds() {
    local fd
    for fd in /proc/"$BASHPID"/fd/*; do
        fd="${fd##*/}"
        if [[ "$fd" =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ]; then
            eval "exec $fd>&-" 2>/dev/null || true
        fi
    done
}

# Runs a command as the cluster's owner, from a directory that owner can enter, with no
# descriptors but stdin, stdout and stderr.
as_owner() {
    if [ -z "$RUN_AS" ]; then
        (cd / && close_inherited_fds && "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && close_inherited_fds && runuser -u "$RUN_AS" -- "$@")
    else
        (cd / && close_inherited_fds && su -s /bin/sh "$RUN_AS" -c "$(printf '%q ' "$@")")
    fi
}

# Prepares $1 as the cluster's base directory, owned by the cluster's owner; fails if the owner
# cannot reach it.
prepare_dir() {
    local dir="$1"
    mkdir -p "$dir"
    if [ -n "$RUN_AS" ]; then
        chown "$RUN_AS": "$dir"
    fi
    as_owner test -w "$dir" -a -x "$dir" 2>/dev/null
}

# Stops a cluster in $1/data if one runs there.
stop_cluster() {
    local data="$1/data" bindir="$2"
    if [ -f "$data/postmaster.pid" ]; then
        log "stopping the cluster in $data"
        as_owner "$bindir/pg_ctl" -D "$data" -m fast -w stop ||
            log "pg_ctl stop failed; the server may already be gone"
    fi
}

# The base directories a cluster may be in, for `stop` and for cleaning up before `start`.
candidate_dirs() {
    if [ -n "${AGENTRY_CI_PG_DIR:-}" ]; then
        echo "$AGENTRY_CI_PG_DIR"
    else
        echo "$DEFAULT_DIR"
        # Only root's start falls back (see the top of this file).
        if [ "$(id -u)" -eq 0 ]; then echo "$FALLBACK_DIR"; fi
    fi
}

start() {
    local bindir base data
    if ! bindir="$(find_bindir)"; then
        install_postgres
        bindir="$(find_bindir)" || die "PostgreSQL was installed but initdb/pg_ctl are not to be found"
    fi
    log "using PostgreSQL binaries in $bindir ($("$bindir/pg_ctl" --version))"
    choose_user

    # Fresh each time: stop and remove whatever an earlier start left behind.
    while read -r base; do
        stop_cluster "$base" "$bindir"
        rm -rf "$base/data" "$base/server.log"
    done < <(candidate_dirs)

    if [ -n "${AGENTRY_CI_PG_DIR:-}" ]; then
        base="$AGENTRY_CI_PG_DIR"
        prepare_dir "$base" || die "user $DB_USER cannot write to $base (AGENTRY_CI_PG_DIR); choose a directory it can reach"
    else
        base="$DEFAULT_DIR"
        if ! prepare_dir "$base"; then
            rmdir "$base" 2>/dev/null || true
            log "user $DB_USER cannot reach $base (a private home directory); using $FALLBACK_DIR"
            base="$FALLBACK_DIR"
            prepare_dir "$base" || die "user $DB_USER cannot write to $base"
        fi
    fi
    data="$base/data"

    log "creating a cluster in $data"
    as_owner "$bindir/initdb" -D "$data" -U "$DB_USER" --auth=trust --encoding=UTF8 --no-locale --no-sync >/dev/null

    # TCP on loopback only, no Unix socket (its default directory may not exist, and a long
    # path would exceed the socket name limit), trust for loopback only. Durability is off:
    # the cluster is thrown away after the tests.
    as_owner tee -a "$data/postgresql.conf" >/dev/null <<EOF

# agentry CI (.ci/postgres.sh)
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = ''
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    as_owner tee "$data/pg_hba.conf" >/dev/null <<EOF
# agentry CI (.ci/postgres.sh): loopback TCP only, no passwords.
host all all 127.0.0.1/32 trust
EOF

    log "starting PostgreSQL on 127.0.0.1:$PORT"
    if ! as_owner "$bindir/pg_ctl" -D "$data" -l "$base/server.log" -w -t 60 start; then
        tail -n 20 "$base/server.log" >&2 || true
        die "PostgreSQL did not start (is port $PORT taken? set AGENTRY_CI_PG_PORT)"
    fi
    "$bindir/createdb" -h 127.0.0.1 -p "$PORT" -U "$DB_USER" "$DATABASE"

    echo "export AGENTRY_TEST_POSTGRES_URL=postgres://$DB_USER@127.0.0.1:$PORT/$DATABASE" >&3
}

stop() {
    local bindir base
    bindir="$(find_bindir)" || {
        log "PostgreSQL is not installed; nothing to stop"
        return 0
    }
    if [ "$(id -u)" -eq 0 ]; then
        # No postgres user: start never ran here as root, so there is nothing to stop.
        id postgres >/dev/null 2>&1 || return 0
        RUN_AS=postgres
    fi
    while read -r base; do
        stop_cluster "$base" "$bindir"
    done < <(candidate_dirs)
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) die "usage: bash .ci/postgres.sh start|stop" ;;
esac
