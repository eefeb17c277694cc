#!/usr/bin/env bash
# Makes sure the project's virtualenv .venv (in the repository root) exists and
# has the project installed in editable mode, then returns.
#
#   scripts/venv.sh                                  pip install -e .
#   scripts/venv.sh '.[postgresql,mysql,oracle,test]'
#
# pip runs once per SPEC until pyproject.toml changes (delete .venv to start over).
# Used by scripts/test.sh and scripts/demo.sh. SA_INBOX_PYTHON picks the
# interpreter that creates the virtualenv (default python3).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${SA_INBOX_PYTHON:-python3}
SPEC=${1:-.}
VENV=.venv

log() { printf 'venv.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Debian's python3 has no ensurepip (hence no `python3 -m venv`) without the
# python3-venv package: install it when we can.
ensure_venv_module() {
    "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null && return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "$PYTHON cannot create virtualenvs (no venv/ensurepip module)"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "$PYTHON lacks ensurepip: apt-get install python3-venv (as root)"
        sudo=(sudo)
    fi
    log "installing python3-venv (apt-get)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
}

# A virtualenv whose python or pip does not run (interpreter moved, half-made
# by an interrupted run) is made again.
venv_works() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}

if ! venv_works; then
    ensure_venv_module
    log "creating $VENV with $("$PYTHON" --version 2>&1)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi

# The install is editable (the code is read from the checkout), so pip runs again only
# when pyproject.toml changed since this SPEC was installed: one line per SPEC in $STAMP.
STAMP=$VENV/.sa-inbox-installed
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1) $SPEC"
if [ -f "$STAMP" ] && grep -qxF -- "$WANT" "$STAMP"; then
    log "'$SPEC' installed already (pyproject.toml unchanged)"
    exit 0
fi

log "pip install -e '$SPEC'"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$SPEC"

# The test suite compiles CockroachDB's SQL with sqlalchemy-cockroachdb's dialect (the
# [cockroachdb] extra). That package pins SQLAlchemy < 2.1, so it is installed without its
# dependencies: the suite keeps testing the SQLAlchemy the project itself resolved.
if [[ $SPEC == *test* ]]; then
    log "pip install --no-deps sqlalchemy-cockroachdb (compiled-SQL tests)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        'sqlalchemy-cockroachdb>=2.0.4'
fi
echo "$WANT" >>"$STAMP"
