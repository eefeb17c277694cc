#!/usr/bin/env bash
# The documentation of sa-inbox (docs/, Sphinx):
#
#   scripts/docs.sh              build docs/_build/html, then serve it on http://127.0.0.1:8000
#   scripts/docs.sh build        build only: warnings are errors and every reference must
#                                resolve (sphinx-build -W --keep-going -n), then the link
#                                checks: Sphinx's (-b linkcheck; links to other sites are
#                                ignored, none is reachable here) and scripts/docs_links.py
#                                (every link between pages: its file and its anchor)
#   scripts/docs.sh serve [PORT] serve the last build (python -m http.server, loopback only)
#
# Makes the virtualenv .venv with the [docs] extra if Sphinx is missing from it. The build
# reads no network: the intersphinx inventories are files of docs/_inventories/.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${SA_INBOX_DOCS_OUT:-docs/_build} # where the build goes (scripts/test.sh: a temporary one)
COMMAND=${1:-all}
PORT=${2:-8000}

ensure_sphinx() {
    if ! .venv/bin/python -c 'import sphinx, myst_parser, furo, sphinx_click' 2>/dev/null; then
        echo "docs.sh: installing the [docs] extra into .venv" >&2
        scripts/venv.sh '.[docs]'
    fi
}

build() {
    ensure_sphinx
    rm -rf "$OUT"
    .venv/bin/python -m sphinx -b html -W --keep-going -n -q docs "$OUT/html"
    .venv/bin/python -m sphinx -b linkcheck -W --keep-going -n -q docs "$OUT/linkcheck"
    .venv/bin/python scripts/docs_links.py "$OUT/html"
    echo "docs.sh: built $OUT/html/index.html (links checked: $OUT/linkcheck/output.txt)"
}

serve() {
    [ -f "$OUT/html/index.html" ] || build
    echo "docs.sh: serving $OUT/html on http://127.0.0.1:$PORT/ (Ctrl-C stops)"
    exec .venv/bin/python -m http.server "$PORT" --bind 127.0.0.1 --directory "$OUT/html"
}

case "$COMMAND" in
    all) build && serve ;;
    build) build ;;
    serve) serve ;;
    *) echo "usage: scripts/docs.sh [build | serve [PORT]]" >&2 && exit 2 ;;
esac
