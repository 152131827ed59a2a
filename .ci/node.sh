#!/usr/bin/env bash
# The real Node peers the tests run against: the OpenAI clients (the Vercel AI SDK with
# @ai-sdk/openai-compatible, and the `openai` package) for the server's interop tests
# (crates/agent-server/tests/node_client/), and the reference MCP server
# `@modelcontextprotocol/server-everything` for agent-mcp's client tests
# (crates/agent-mcp/tests/node/).
#
#   eval "$(bash .ci/node.sh)"   # prints: export AGENTRY_TEST_NODE=<path of node>
#                                #         export AGENTRY_TEST_MCP_EVERYTHING=<its entry script>
#
# Installs exactly each directory's committed package-lock.json with `npm ci` into its
# node_modules (never committed), skipping it when node_modules already matches the lock. Node
# and npm come from the machine; when they are missing and we are root, from Debian's
# packages. Only the export line goes to stdout, so the output can be eval'd.
set -euo pipefail

# Only the export line goes to stdout (fd 3); every command's output goes to stderr.
exec 3>&1 1>&2
root="$(cd "$(dirname "$0")/.." && pwd)"

log() { echo "node.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 ||
        die "node and npm are not on PATH and this user cannot apt-get install them"
    export DEBIAN_FRONTEND=noninteractive
    log "installing nodejs and npm from Debian's packages"
    apt-get update
    apt-get install -y --no-install-recommends nodejs npm
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 18 ] || die "node $(node --version) is too old: the clients need 18 or later"

# npm ci deletes and rebuilds node_modules: skip it when node_modules was installed from this
# very lock file (a stamp holding the lock's digest, written after a successful install).
install_lock() {
    cd "$1"
    local lock
    lock="$(sha256sum package-lock.json | cut -d' ' -f1)"
    if [ "$(cat node_modules/.agentry-lock 2>/dev/null || true)" != "$lock" ]; then
        log "npm ci in $(pwd)"
        local started=$SECONDS
        npm ci --no-audit --no-fund --loglevel=error
        echo "$lock" >node_modules/.agentry-lock
        log "npm ci took $((SECONDS - started)) s"
    fi
}

install_lock "$root/crates/agent-mcp/tests/node"
everything="$root/crates/agent-mcp/tests/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
[ -f "$everything" ] || die "server-everything is not where the lock put it: $everything"

install_lock "$root/crates/agent-server/tests/node_client"
node -e 'import("ai").then(() => import("@ai-sdk/openai-compatible")).then(() => import("openai"))' ||
    die "the installed clients do not load"
log "node $(node --version) with the locked clients ready"

printf 'export AGENTRY_TEST_NODE=%q\n' "$(command -v node)" >&3
printf 'export AGENTRY_TEST_MCP_EVERYTHING=%q\n' "$everything" >&3
