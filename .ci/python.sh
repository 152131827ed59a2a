#!/usr/bin/env bash
# A Python virtual environment with the official `openai` client, for the server's
# OpenAI-compatibility tests (crates/agent-server/tests/openai_client/).
#
#   eval "$(bash .ci/python.sh)"   # prints one line: export AGENTRY_TEST_PYTHON=<venv>/bin/python
#
# Creates the venv with `python3 -m venv` (installing Debian's python3-venv if the module is
# missing and we are root) and pip-installs the pinned client into it. Running it again reuses
# the venv and skips pip when the pinned version is already there. Only the export line goes to
# stdout, so the output can be eval'd; everything else goes to stderr.
#
# Settings (environment):
#   AGENTRY_CI_VENV   where the venv lives (default: $HOME/.cache/agentry-ci/venv)
set -euo pipefail

# Only the export line goes to stdout (fd 3); every command's output goes to stderr.
exec 3>&1 1>&2

# The client the tests are written against; bump deliberately, the tests pin wire behaviour.
OPENAI_VERSION=3.54.0

log() { echo "python.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

VENV="${AGENTRY_CI_VENV:-${HOME:-/root}/.cache/agentry-ci/venv}"
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

# A venv left half-made (or made by another interpreter that is gone) is made again.
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "creating the venv at $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON3" -m venv "$VENV"
fi

installed="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("openai"))' 2>/dev/null || true)"
if [ "$installed" != "$OPENAI_VERSION" ]; then
    log "installing openai==$OPENAI_VERSION (found: ${installed:-none})"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION"
fi
"$VENV/bin/python" -c 'import openai' || die "the venv's openai does not import"
log "openai $OPENAI_VERSION ready in $VENV"

printf 'export AGENTRY_TEST_PYTHON=%q\n' "$VENV/bin/python" >&3
