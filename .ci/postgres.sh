#!/usr/bin/env bash
# A throwaway PostgreSQL for the test suite.
#
#   eval "$(bash .ci/postgres.sh start)"   # prints export lines: AGENTRY_TEST_POSTGRES_URL,
#                                          # AGENTRY_CI_PG_PORT, AGENTRY_CI_PG_DIR and
#                                          # AGENTRY_TEST_PG_BINDIR (the server binaries, for
#                                          # tests that run a cluster of their own)
#   bash .ci/postgres.sh stop              # stops the cluster those name (and removes it)
#
# `start` finds PostgreSQL's server binaries (PATH, then /usr/lib/postgresql/*/bin) or installs
# Debian's `postgresql` package, creates a fresh cluster of the run's own, listening on
# 127.0.0.1 only with trust authentication, starts it, creates the database `agentry_test` and
# prints the URL, the port and the directory as shell `export` lines. Everything else goes to
# stderr, so the output can be eval'd. `stop` stops the cluster in AGENTRY_CI_PG_DIR and, when
# `start` created that directory for its run, removes it.
#
# Each run has its own port and directory, so two runs on one machine do not collide: nothing
# here stops or removes a cluster another run started, and a directory with a running cluster
# in it is refused, never taken over.
#
# Settings (environment):
#   AGENTRY_CI_PG_DIR   where the cluster lives (default: a directory of the run's own,
#                       $HOME/.cache/agentry-ci/pg/<run id>)
#   AGENTRY_CI_PG_PORT  the TCP port (default: a free port from 55433 up, found at start)
#   AGENTRY_CI_RUN_ID   names the run's directory (default: the process id and the time)
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

PORT="${AGENTRY_CI_PG_PORT:-}"
RUN_ID="${AGENTRY_CI_RUN_ID:-$$-$(date +%s)}"
DEFAULT_DIR="${HOME:-/root}/.cache/agentry-ci/pg/$RUN_ID"
FALLBACK_DIR="/var/tmp/agentry-ci/pg/$RUN_ID"
DATABASE=agentry_test
# Marks a directory `start` created for its run, which `stop` may therefore remove.
MARKER=.agentry-ci-run

[[ -z "$PORT" || "$PORT" =~ ^[0-9]+$ ]] || die "AGENTRY_CI_PG_PORT must be a port number, not '$PORT'"
[[ "$RUN_ID" =~ ^[A-Za-z0-9._-]+$ ]] || die "AGENTRY_CI_RUN_ID may hold only letters, digits, '.', '_' and '-'"

# Whether something accepts connections on 127.0.0.1:$1.
port_taken() {
    (exec 9<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The ports to try: the one asked for, else free ones from 55433 up (55432 stays for a
# developer's own cluster), from an offset taken from the run id so that runs started at the
# same moment try different ports first.
candidate_ports() {
    if [ -n "$PORT" ]; then
        echo "$PORT"
        return
    fi
    local offset port n
    offset=$(($(printf '%s' "$RUN_ID" | cksum | cut -d' ' -f1) % 500))
    for n in $(seq 0 499); do
        port=$((55433 + (offset + n) % 500))
        port_taken "$port" || echo "$port"
    done
}

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

# Whether a cluster runs in $1/data: its postmaster.pid names a live process.
cluster_running() {
    local pid
    [ -f "$1/data/postmaster.pid" ] || return 1
    pid="$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
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

start() {
    local bindir base data port started=""
    if ! bindir="$(find_bindir)"; then
        install_postgres
        bindir="$(find_bindir)" || die "PostgreSQL was installed but initdb/pg_ctl are not to be found"
    fi
    log "using PostgreSQL binaries in $bindir ($("$bindir/pg_ctl" --version))"
    choose_user

    if [ -n "${AGENTRY_CI_PG_DIR:-}" ]; then
        base="$AGENTRY_CI_PG_DIR"
        # A running cluster (another run's, a developer's) is never stopped or removed.
        if cluster_running "$base"; then
            die "a cluster is running in $base/data; stop it or choose another AGENTRY_CI_PG_DIR"
        fi
        # What a crashed earlier start left here.
        rm -rf "$base/data" "$base/server.log"
        prepare_dir "$base" || die "user $DB_USER cannot write to $base (AGENTRY_CI_PG_DIR); choose a directory it can reach"
    else
        base="$DEFAULT_DIR"
        if ! prepare_dir "$base"; then
            rmdir "$base" 2>/dev/null || true
            log "user $DB_USER cannot reach $base (a private home directory); using $FALLBACK_DIR"
            base="$FALLBACK_DIR"
            prepare_dir "$base" || die "user $DB_USER cannot write to $base"
        fi
        # The run's own directory: `stop` removes it.
        touch "$base/$MARKER"
    fi
    data="$base/data"

    log "creating a cluster in $data"
    as_owner "$bindir/initdb" -D "$data" -U "$DB_USER" --auth=trust --encoding=UTF8 --no-locale --no-sync >/dev/null

    # TCP on loopback only, no Unix socket (its default directory may not exist, and a long
    # path would exceed the socket name limit), trust for loopback only. Durability is off:
    # the cluster is thrown away after the tests. The port is given at start (-p), so that a
    # port another run took in the meantime can be swapped for the next free one.
    as_owner tee -a "$data/postgresql.conf" >/dev/null <<EOF

# agentry CI (.ci/postgres.sh)
listen_addresses = '127.0.0.1'
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

    local tries=0
    while read -r port; do
        tries=$((tries + 1))
        [ "$tries" -le 20 ] || break
        log "starting PostgreSQL on 127.0.0.1:$port"
        if as_owner "$bindir/pg_ctl" -D "$data" -l "$base/server.log" -o "-p $port" -w -t 60 start; then
            started="$port"
            break
        fi
        tail -n 5 "$base/server.log" >&2 || true
        log "PostgreSQL did not start on port $port (taken?)"
    done < <(candidate_ports)
    [ -n "$started" ] || die "PostgreSQL did not start (no free port found; set AGENTRY_CI_PG_PORT)"
    "$bindir/createdb" -h 127.0.0.1 -p "$started" -U "$DB_USER" "$DATABASE"

    {
        echo "export AGENTRY_TEST_POSTGRES_URL=postgres://$DB_USER@127.0.0.1:$started/$DATABASE"
        echo "export AGENTRY_CI_PG_PORT=$started"
        echo "export AGENTRY_CI_PG_DIR=$(printf '%q' "$base")"
        echo "export AGENTRY_TEST_PG_BINDIR=$(printf '%q' "$bindir")"
    } >&3
}

stop() {
    local bindir base
    # Only the cluster of this run: the directory `start` printed.
    base="${AGENTRY_CI_PG_DIR:-}"
    if [ -z "$base" ]; then
        log "AGENTRY_CI_PG_DIR is not set (eval start's output first); nothing to stop"
        return 0
    fi
    bindir="$(find_bindir)" || {
        log "PostgreSQL is not installed; nothing to stop"
        return 0
    }
    if [ "$(id -u)" -eq 0 ]; then
        # No postgres user: start never ran here as root, so there is nothing to stop.
        id postgres >/dev/null 2>&1 || return 0
        RUN_AS=postgres
    fi
    stop_cluster "$base" "$bindir"
    if [ -f "$base/$MARKER" ]; then
        rm -rf "$base"
    fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) die "usage: bash .ci/postgres.sh start|stop" ;;
esac
