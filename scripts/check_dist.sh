#!/usr/bin/env bash
# The artifact check of sa-inbox:   ./scripts/check_dist.sh      (run by scripts/test.sh)
#
# From scratch on every run, in a temporary directory removed at exit:
#   1. builds the sdist and the wheel (python -m build: the wheel is built from the sdist),
#      checks them (twine check --strict, check-wheel-contents) and what the wheel holds:
#      the sa_inbox package with its templates and data, the licence, nothing else
#   2. installs the wheel alone into a fresh virtualenv: every module imports or fails with
#      the one-line extra message, every command answers --help, a command whose extra is
#      missing exits 2 with one line, sa-inbox demo passes on embedded SQLite and
#      sa-inbox demo --no-inbox shows its double-applied money (exit 1)
#   3. each extra alone (a virtualenv with the wheel and that one extra, a few at a time):
#      no module asks for it any more, and what it installs (a driver, greenlet) imports
#   4. ./scripts/demo.sh from a fresh git clone of HEAD (no .venv: it makes its own)
# Uses .venv (scripts/venv.sh with the test extra: build, twine, check-wheel-contents);
# pip's download cache is shared by the virtualenvs. Exit status non-zero if a step failed.
#
# Environment: SA_INBOX_PYTHON     the interpreter of the fresh virtualenvs (default python3)
#              SA_INBOX_DIST_JOBS  extras checked at a time (default 3)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${SA_INBOX_PYTHON:-python3}
JOBS=${SA_INBOX_DIST_JOBS:-3} # each extra waits on the package index as much as on the CPU
TOOLS=$ROOT/.venv/bin
MATRIX=$ROOT/scripts/import_matrix.py
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sa-inbox-dist.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH

STARTED=$SECONDS
step() { printf '\n----- %s (%ds)\n' "$*" $((SECONDS - STARTED)); }
die() { printf 'check_dist: FAILED: %s\n' "$*" >&2; exit 1; }

# What each extra installs that no sa_inbox module names in its message: the database
# drivers (imported by SQLAlchemy's dialects) and greenlet (sqlalchemy.ext.asyncio).
declare -A REQUIRES=(
    [postgresql]="psycopg" [mysql]="pymysql" [oracle]="oracledb"
    [cockroachdb]="sqlalchemy_cockroachdb psycopg"
    [asyncio]="sqlalchemy.ext.asyncio" [asyncpg]="asyncpg sqlalchemy.ext.asyncio"
    [aiomysql]="aiomysql sqlalchemy.ext.asyncio" [aiosqlite]="aiosqlite sqlalchemy.ext.asyncio"
    [rabbitmq]="sqlalchemy.ext.asyncio" [redis]="sqlalchemy.ext.asyncio"
    [nats]="sqlalchemy.ext.asyncio" [faststream]="sqlalchemy.ext.asyncio"
    [kafka]="sqlalchemy.ext.asyncio"
    [sqs]="sqlalchemy.ext.asyncio"
    [bench]="matplotlib" [celery]="" [alembic]="" [prometheus]="" [opentelemetry]=""
    [testing]="" [console]="starlette jinja2 uvicorn itsdangerous"
)

# install_into DIR REQUIREMENT...: the requirements installed into the virtualenv DIR (made
# if missing) by .venv's pip (--python: the same install, without seeding each virtualenv
# with a pip of its own; --no-compile: a module is compiled when first imported); pip check.
install_into() {
    local dir=$1
    shift
    [ -d "$dir" ] || "$PYTHON" -m venv --without-pip "$dir"
    "$TOOLS/pip" --python "$dir/bin/python" install --quiet --no-input --no-compile "$@" 2>&1 |
        grep -v "^WARNING: Location '.*' is ignored" || true
    "$TOOLS/pip" --python "$dir/bin/python" check >/dev/null ||
        die "pip check in $dir: $("$TOOLS/pip" --python "$dir/bin/python" check)"
}

# ------------------------------------------------------------------ 1. build and inspect
step "build the sdist and the wheel"
"$TOOLS/python" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 ||
    { cat "$WORK/build.log"; die "python -m build"; }
WHEEL=$(echo "$WORK"/dist/*.whl)
SDIST=$(echo "$WORK"/dist/*.tar.gz)
if [ ! -f "$WHEEL" ] || [ ! -f "$SDIST" ]; then die "build made no wheel or no sdist"; fi
"$TOOLS/twine" check --strict "$WORK"/dist/*
"$TOOLS/check-wheel-contents" "$WHEEL"

"$TOOLS/python" - "$WHEEL" "$SDIST" <<'EOF'
"""The wheel holds the sa_inbox package (its templates and data), the pytest plugin's
module and its metadata and licence, nothing else; the sdist holds the licence."""
import sys, tarfile, zipfile
from pathlib import Path

wheel, sdist = Path(sys.argv[1]), Path(sys.argv[2])
names = zipfile.ZipFile(wheel).namelist()
dist_info = wheel.name.split("-py3")[0] + ".dist-info/"
plugin = "_sa_inbox_pytestplugin.py"
stray = [n for n in names if not n.startswith(("sa_inbox/", dist_info)) and n != plugin]
needed = [plugin, "sa_inbox/py.typed", "sa_inbox/bench/growth_figures.json", dist_info + "licenses/LICENSE"]
needed += [f"sa_inbox/alembic_templates/sa_inbox/{f}"
           for f in ("README", "alembic.ini.mako", "env.py", "script.py.mako")]
missing = [n for n in needed if n not in names]
assert not stray and not missing, f"wheel: not ours {stray}, missing {missing}"
assert not any("__pycache__" in n or n.endswith(".pyc") for n in names), "compiled files"
members = tarfile.open(sdist).getnames()
top = members[0].split("/")[0]
assert f"{top}/LICENSE" in members, "sdist without LICENSE"
print(f"wheel {wheel.name}: {wheel.stat().st_size:,} bytes, {len(names)} files; "
      f"sdist {sdist.stat().st_size:,} bytes, {len(members)} members")
EOF

# ------------------------------------------------------------------ 2. the wheel alone
step "the wheel alone: imports, --help, a missing extra, sa-inbox demo"
BARE=$WORK/venv-bare
install_into "$BARE" "$WHEEL"
"$BARE/bin/python" -I "$MATRIX" modules >"$WORK/bare-modules.txt" ||
    { cat "$WORK/bare-modules.txt"; die "import matrix of the wheel alone"; }
tail -n 1 "$WORK/bare-modules.txt"
"$BARE/bin/python" -I "$MATRIX" cli >"$WORK/bare-cli.txt" ||
    { cat "$WORK/bare-cli.txt"; die "--help matrix of the wheel alone"; }
echo "--help: $(grep -c '^ok' "$WORK/bare-cli.txt") commands answered"
code=0
(cd "$WORK" && "$BARE/bin/sa-inbox" alembic init migrations) 2>"$WORK/missing.txt" || code=$?
expected="Error: sa_inbox.cli.alembic needs the 'alembic' extra: pip install 'sa-inbox[alembic]'"
if [ "$code" -ne 2 ] || [ "$(cat "$WORK/missing.txt")" != "$expected" ]; then
    die "sa-inbox alembic init without the extra: exit $code, $(cat "$WORK/missing.txt")"
fi
echo "sa-inbox alembic init without [alembic]: exit 2, $expected"
(cd "$WORK" && "$BARE/bin/sa-inbox" demo) >"$WORK/demo.txt" 2>&1 ||
    { cat "$WORK/demo.txt"; die "sa-inbox demo from the wheel alone"; }
grep '^PASS' "$WORK/demo.txt"
code=0
(cd "$WORK" && "$BARE/bin/sa-inbox" demo --no-inbox --messages 200) >"$WORK/naive.txt" 2>&1 || code=$?
if [ "$code" -ne 1 ] || grep -q Traceback "$WORK/naive.txt"; then
    cat "$WORK/naive.txt"
    die "sa-inbox demo --no-inbox: exit $code (1 expected: the naive consumer double-applies)"
fi
echo "sa-inbox demo --no-inbox: exit 1, $(grep '^FAIL' "$WORK/naive.txt")"

# ------------------------------------------------------------------ 3. each extra alone
# (not [test] and [docs]: the tools of the checks and of the docs build, not of the library)
step "each extra alone"
mapfile -t EXTRAS < <("$TOOLS/python" -c '
import tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
print("\n".join(sorted(e for e in extras if e not in ("test", "docs"))))')
for extra in "${EXTRAS[@]}"; do
    [ -v "REQUIRES[$extra]" ] || die "no entry for the [$extra] extra in REQUIRES (this script)"
done

# check_extra EXTRA: the wheel and EXTRA in a virtualenv of their own, its matrix; the
# output in $WORK/extra-EXTRA.txt. The virtualenv starts as a copy of the wheel-alone one
# (the wheel and its dependencies, resolved and installed there just before) and pip
# installs the wheel with the extra into it: the same packages as a fresh install of
# 'sa-inbox[EXTRA]' (pip re-resolves, and changes what the extra constrains: [cockroachdb]
# takes SQLAlchemy back to 2.0), without unpacking SQLAlchemy and rich once per extra.
check_extra() {
    local extra=$1 venv=$WORK/venv-$1 out=$WORK/extra-$1.txt args=()
    local module started=$SECONDS
    for module in ${REQUIRES[$extra]}; do args+=(--require "$module"); done
    {
        cp -a "$BARE" "$venv" && install_into "$venv" "${WHEEL}[$extra]" &&
            "$venv/bin/python" -I "$MATRIX" modules --installed "$extra" "${args[@]}"
    } >"$out" 2>&1 || { echo "FAIL [$extra]" >>"$out"; return 1; }
    echo "$((SECONDS - started))" >"$out.seconds"
    rm -rf "$venv"
}
export -f check_extra install_into die
export WORK WHEEL MATRIX PYTHON TOOLS BARE
export REQUIRES_DECL
REQUIRES_DECL=$(declare -p REQUIRES)
# ok_count FILE: how many modules a matrix output says import.
ok_count() { tail -n 1 "$1" | grep -o '[0-9]* ok$' | cut -d' ' -f1; }
failed=0
# shellcheck disable=SC2016 # $1 and $REQUIRES_DECL expand in the bash that xargs starts
printf '%s\n' "${EXTRAS[@]}" |
    xargs -P "$JOBS" -I{} bash -c 'eval "$REQUIRES_DECL"; check_extra "$1"' _ {} || failed=1
for extra in "${EXTRAS[@]}"; do
    if grep -q '^FAIL' "$WORK/extra-$extra.txt"; then
        cat "$WORK/extra-$extra.txt"
    else
        printf '[%s] %s modules import (%s with the wheel alone), %s s\n' "$extra" \
            "$(ok_count "$WORK/extra-$extra.txt")" "$(ok_count "$WORK/bare-modules.txt")" \
            "$(cat "$WORK/extra-$extra.txt.seconds")"
    fi
done
[ "$failed" -eq 0 ] || die "an extra alone"

# ------------------------------------------------------------------ 4. demo.sh, fresh clone
step "./scripts/demo.sh from a fresh clone of HEAD"
git clone --quiet --no-hardlinks "$ROOT" "$WORK/clone"
[ ! -e "$WORK/clone/.venv" ] || die "the clone has a .venv"
(cd "$WORK/clone" && ./scripts/demo.sh) >"$WORK/demo-sh.txt" 2>&1 ||
    { cat "$WORK/demo-sh.txt"; die "./scripts/demo.sh in a fresh clone"; }
grep '^PASS' "$WORK/demo-sh.txt"

step "artifact check passed"
