#!/usr/bin/env bash
# Python virtual environments with the real OpenAI clients, for the server's
# OpenAI-compatibility tests (crates/agent-server/tests/openai_client/):
#   - the main venv: the official `openai` client and `langchain-openai`;
#   - a second venv for `litellm`, whose releases that accept openai 3.x all require a
#     `certifi` newer than PyPI has, so it gets the openai 2.x it resolves to on its own;
#   - a third for the official MCP Python SDK (`mcp`), the client of agent-mcp's server tests;
#   - a fourth with the official `opentelemetry-proto` package, for the OTLP receiver the
#     CLI's OpenTelemetry tests export to (crates/agentry-cli/tests/otlp/receiver.py).
#
#   eval "$(bash .ci/python.sh)"   # prints four lines:
#     export AGENTRY_TEST_PYTHON=<venv>/bin/python
#     export AGENTRY_TEST_LITELLM_PYTHON=<litellm venv>/bin/python
#     export AGENTRY_TEST_MCP_PYTHON=<mcp venv>/bin/python
#     export AGENTRY_TEST_OTEL_PYTHON=<opentelemetry-proto venv>/bin/python
#
# Creates the venvs with `python3 -m venv` (installing Debian's python3-venv if the module is
# missing and we are root) and pip-installs the pinned clients into them. Running it again
# reuses the venvs and skips pip when the pinned versions are already there. Only the export
# lines go to stdout, so the output can be eval'd; everything else goes to stderr.
#
# Settings (environment):
#   AGENTRY_CI_VENV          where the main venv lives (default: $HOME/.cache/agentry-ci/venv)
#   AGENTRY_CI_LITELLM_VENV  where litellm's lives (default: $HOME/.cache/agentry-ci/venv-litellm)
#   AGENTRY_CI_MCP_VENV      where mcp's lives (default: $HOME/.cache/agentry-ci/venv-mcp)
#   AGENTRY_CI_OTEL_VENV     where opentelemetry-proto's lives (default: $HOME/.cache/agentry-ci/venv-otel)
set -euo pipefail

# Only the export line goes to stdout (fd 3); every command's output goes to stderr.
exec 3>&1 1>&2

# The client the tests are written against; bump deliberately, the tests pin wire behaviour.
OPENAI_VERSION=3.54.0
# langchain-core pinned too: its newer releases need a certifi newer than PyPI has, and pip
# would spend minutes backtracking to find that out.
LANGCHAIN_OPENAI_VERSION=1.7.3
LANGCHAIN_CORE_VERSION=1.7.2
LITELLM_VERSION=1.100.5
# The official MCP Python SDK, the client agent-mcp's server tests run against (its own venv:
# its pins must not fight the OpenAI clients').
MCP_VERSION=2.3.0
# Frontend peers of the server's Responses and AG-UI endpoints (same venv as `openai`: they
# accept its pin): the OpenAI Agents SDK and the AG-UI protocol's Pydantic models.
OPENAI_AGENTS_VERSION=0.24.0
AG_UI_PROTOCOL_VERSION=1.0.0
# The official OTLP protobuf bindings (with the protobuf runtime they pin), which decode what
# the exporter sends in the CLI's OpenTelemetry tests.
OTEL_PROTO_VERSION=1.45.2

log() { echo "python.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

PYTHON3="$(command -v python3 || true)"
[ -n "$PYTHON3" ] || die "python3 is not on PATH"

# Debian splits venv and ensurepip out of the interpreter package.
if ! "$PYTHON3" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 ||
        die "python3 has no venv/ensurepip module and this user cannot apt-get install python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    log "installing python3-venv from Debian's packages"
    apt-get update
    apt-get install -y --no-install-recommends python3-venv
fi

# Makes (or reuses) the venv at $1 and pip-installs the pinned requirements after it; skips pip
# when `$2==$3` (a distribution and version) is what the venv already has.
venv() {
    local venv="$1" probe="$2" version="$3"
    shift 3
    # A venv left half-made (or made by another interpreter that is gone) is made again.
    if ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
        log "creating the venv at $venv"
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$PYTHON3" -m venv "$venv"
    fi
    local installed
    installed="$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$probe'))" 2>/dev/null || true)"
    if [ "$installed" != "$version" ] || ! "$venv/bin/python" -m pip check >/dev/null 2>&1; then
        log "installing $* into $venv (found $probe ${installed:-none})"
        local started=$SECONDS
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
        log "pip took $((SECONDS - started)) s"
    fi
}

VENV="${AGENTRY_CI_VENV:-${HOME:-/root}/.cache/agentry-ci/venv}"
MCP_VENV="${AGENTRY_CI_MCP_VENV:-${HOME:-/root}/.cache/agentry-ci/venv-mcp}"
OTEL_VENV="${AGENTRY_CI_OTEL_VENV:-${HOME:-/root}/.cache/agentry-ci/venv-otel}"
LITELLM_VENV="${AGENTRY_CI_LITELLM_VENV:-${HOME:-/root}/.cache/agentry-ci/venv-litellm}"

venv "$VENV" langchain-openai "$LANGCHAIN_OPENAI_VERSION" \
    "openai==$OPENAI_VERSION" "langchain-openai==$LANGCHAIN_OPENAI_VERSION" \
    "langchain-core==$LANGCHAIN_CORE_VERSION"
"$VENV/bin/python" -c 'import openai, langchain_openai' || die "the venv's clients do not import"
log "openai $OPENAI_VERSION and langchain-openai $LANGCHAIN_OPENAI_VERSION ready in $VENV"
venv "$VENV" openai-agents "$OPENAI_AGENTS_VERSION" "openai==$OPENAI_VERSION" \
    "openai-agents==$OPENAI_AGENTS_VERSION" "ag-ui-protocol==$AG_UI_PROTOCOL_VERSION"
"$VENV/bin/python" -c 'import agents, ag_ui.core' || die "the venv's frontend peers do not import"
log "openai-agents $OPENAI_AGENTS_VERSION and ag-ui-protocol $AG_UI_PROTOCOL_VERSION ready in $VENV"

venv "$LITELLM_VENV" litellm "$LITELLM_VERSION" "litellm==$LITELLM_VERSION"
LITELLM_LOCAL_MODEL_COST_MAP=True "$LITELLM_VENV/bin/python" -c 'import litellm' || die "the litellm venv's client does not import"
log "litellm $LITELLM_VERSION ready in $LITELLM_VENV"

venv "$MCP_VENV" mcp "$MCP_VERSION" "mcp==$MCP_VERSION"
"$MCP_VENV/bin/python" -c 'import mcp.client.stdio, mcp.client.streamable_http' || die "the mcp venv's client does not import"
log "mcp $MCP_VERSION ready in $MCP_VENV"

venv "$OTEL_VENV" opentelemetry-proto "$OTEL_PROTO_VERSION" "opentelemetry-proto==$OTEL_PROTO_VERSION"
"$OTEL_VENV/bin/python" -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2, opentelemetry.proto.collector.metrics.v1.metrics_service_pb2' || die "the otel venv's opentelemetry-proto does not import"
log "opentelemetry-proto $OTEL_PROTO_VERSION ready in $OTEL_VENV"

printf 'export AGENTRY_TEST_PYTHON=%q\n' "$VENV/bin/python" >&3
printf 'export AGENTRY_TEST_LITELLM_PYTHON=%q\n' "$LITELLM_VENV/bin/python" >&3
printf 'export AGENTRY_TEST_MCP_PYTHON=%q\n' "$MCP_VENV/bin/python" >&3
printf 'export AGENTRY_TEST_OTEL_PYTHON=%q\n' "$OTEL_VENV/bin/python" >&3
