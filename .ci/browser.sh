#!/usr/bin/env bash
# A real browser for the console's tests (crates/agentry-cli/tests/console.rs): Chromium and
# chromium-driver from Debian's packages, and Selenium for Python in a venv of its own. No
# browser is downloaded from anywhere else.
#
#   eval "$(bash .ci/browser.sh)"   # prints two lines:
#     export AGENTRY_TEST_CHROMIUM=<path of chromium>
#     export AGENTRY_TEST_BROWSER_PYTHON=<venv>/bin/python   (with selenium; chromedriver on PATH)
#
# Installs the Debian packages when chromium or chromedriver is missing and we are root.
# Running it again reuses the venv and skips pip when the pinned Selenium is there. Only the
# export lines go to stdout, so the output can be eval'd; everything else goes to stderr.
#
# Settings (environment):
#   AGENTRY_CI_BROWSER_VENV  where the venv lives (default: $HOME/.cache/agentry-ci/venv-browser)
set -euo pipefail

# Only the export lines go to stdout (fd 3); every command's output goes to stderr.
exec 3>&1 1>&2

# The client the test script is written against; bump deliberately.
SELENIUM_VERSION=4.51.0

log() { echo "browser.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 ||
        die "chromium and chromedriver are not on PATH and this user cannot apt-get install them"
    export DEBIAN_FRONTEND=noninteractive
    log "installing chromium and chromium-driver from Debian's packages"
    apt-get update
    apt-get install -y --no-install-recommends chromium chromium-driver
fi
CHROMIUM="$(command -v chromium)"
CHROMEDRIVER="$(command -v chromedriver)"
log "$("$CHROMIUM" --version 2>/dev/null | head -1) with $("$CHROMEDRIVER" --version | head -1)"

PYTHON3="$(command -v python3 || true)"
[ -n "$PYTHON3" ] || die "python3 is not on PATH"
if ! "$PYTHON3" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 ||
        die "python3 has no venv/ensurepip module and this user cannot apt-get install python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends python3-venv
fi

VENV="${AGENTRY_CI_BROWSER_VENV:-${HOME:-/root}/.cache/agentry-ci/venv-browser}"
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "creating the venv at $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON3" -m venv "$VENV"
fi
installed="$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('selenium'))" 2>/dev/null || true)"
if [ "$installed" != "$SELENIUM_VERSION" ]; then
    log "installing selenium $SELENIUM_VERSION into $VENV (found ${installed:-none})"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "selenium==$SELENIUM_VERSION"
fi
"$VENV/bin/python" -c 'import selenium.webdriver' || die "the venv's selenium does not import"
log "selenium $SELENIUM_VERSION ready in $VENV"

printf 'export AGENTRY_TEST_CHROMIUM=%q\n' "$CHROMIUM" >&3
printf 'export AGENTRY_TEST_BROWSER_PYTHON=%q\n' "$VENV/bin/python" >&3
