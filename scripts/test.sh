#!/usr/bin/env bash
# The test command of sa-inbox:   ./scripts/test.sh [pytest arguments...]
#
# Works on a bare Debian 12 machine (as root, or with sudo for the first run):
#   1. installs PostgreSQL 15, MariaDB (and Galera), RabbitMQ, Redis, NATS, Tansu (Kafka)
#      and moto (SQS) if missing (scripts/servers.sh install), and Debian's chromium +
#      chromium-driver for the console's browser tests (scripts/servers.sh install browser)
#   2. makes the virtualenv .venv with the project and its test extras
#   3. starts throwaway servers in a temporary directory, removed at exit
#   4. runs pytest (arguments passed through); beside it, niced, one after another: ruff
#      check, ruff format --check, lint-imports (the import contracts of pyproject.toml)
#      and mypy (the versions the test extra pins), the documentation built with warnings
#      as errors and every reference resolved, its links checked (scripts/docs.sh build),
#      and the artifact check (scripts/check_dist.sh): the sdist and the wheel, the wheel
#      alone and with each extra in fresh virtualenvs, ./scripts/demo.sh in a fresh clone
#      of HEAD (commit first: the clone does not see uncommitted changes); their output is
#      printed after pytest's
# The exit status is non-zero if any step failed (pytest's "no tests
# collected", exit 5, counts as a failure).
#
# Environment:
#   SA_INBOX_TEST_POSTGRESQL_URL, SA_INBOX_TEST_MYSQL_URL, SA_INBOX_TEST_AMQP_URL,
#   SA_INBOX_TEST_REDIS_URL, SA_INBOX_TEST_NATS_URL, SA_INBOX_TEST_SQS_URL,
#   SA_INBOX_TEST_GALERA_URLS
#       if set, that server is used and no throwaway one is installed/started
#       (a 3-node MariaDB Galera cluster for the last one; the tests that kill
#       a node also need SA_INBOX_TEST_GALERA_DIR, the directory it was started
#       in by scripts/servers.sh)
#   SA_INBOX_TEST_WORKERS
#       pytest-xdist workers (default 6: most tests wait on servers and child
#       processes more than they compute); pytest runs with
#       `-n $SA_INBOX_TEST_WORKERS --dist loadgroup` unless its arguments choose
#       otherwise (-n/--numprocesses, --dist, -p no:xdist, --pdb, --trace); 0 runs
#       it in one process
#   SA_INBOX_SKIP_LINT=1
#       skip ruff, ruff format, lint-imports and mypy (any non-empty value)
#   SA_INBOX_SKIP_DOCS=1
#       skip the documentation build (any non-empty value; never in CI)
#   SA_INBOX_SKIP_DIST=1
#       skip the artifact check (any non-empty value; never in CI)
set -euo pipefail

cd "$(dirname "$0")/.."

section() { printf '\n===== %s (at %d s) =====\n' "$*" "$SECONDS"; }

# ---------------------------------------------------------------- servers

SERVER_DIR=
CHECK_PID= # the check (pytest, ruff, mypy) running now

# EXIT trap: stops the throwaway servers and removes their directory.
cleanup() {
    if [ -n "$SERVER_DIR" ]; then
        section "Stopping throwaway servers"
        scripts/servers.sh stop "$SERVER_DIR" || true
        rm -rf "$SERVER_DIR" || true
    fi
}

# INT/TERM trap: lets the running check end first, then exits (running the
# EXIT trap). A Ctrl-C reaches the check by itself (same process group); a
# TERM sent to this script alone is passed on to it.
on_signal() {
    local status=$1 signal=$2
    trap '' INT TERM
    if [ -n "$QUEUE_PID" ]; then
        pkill -TERM -P "$QUEUE_PID" 2>/dev/null || true
        kill -TERM "$QUEUE_PID" 2>/dev/null || true
    fi
    if [ -n "$CHECK_PID" ]; then
        if [ "$signal" = TERM ]; then
            kill -TERM "$CHECK_PID" 2>/dev/null || true
        fi
        wait "$CHECK_PID" 2>/dev/null || true
    fi
    exit "$status"
}

trap cleanup EXIT
trap 'on_signal 130 INT' INT
trap 'on_signal 143 TERM' TERM

# Each server and the variable holding its URL.
SERVER_URLS=(postgresql:SA_INBOX_TEST_POSTGRESQL_URL mysql:SA_INBOX_TEST_MYSQL_URL
    rabbitmq:SA_INBOX_TEST_AMQP_URL redis:SA_INBOX_TEST_REDIS_URL nats:SA_INBOX_TEST_NATS_URL
    kafka:SA_INBOX_TEST_KAFKA_URL sqs:SA_INBOX_TEST_SQS_URL
    galera:SA_INBOX_TEST_GALERA_URLS)

# Servers to start: those whose URL the developer did not export.
servers_needed() {
    local pair
    for pair in "${SERVER_URLS[@]}"; do
        local variable=${pair#*:}
        if [ -n "${!variable:-}" ]; then
            echo "using $variable from the environment" >&2
        else
            echo "${pair%%:*}"
        fi
    done
}

start_servers() {
    SERVER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sa-inbox-test.XXXXXX")
    scripts/servers.sh start "$SERVER_DIR" "$@"
    # shellcheck source=/dev/null
    source "$SERVER_DIR/env.sh"
}

# Prints a URL variable with its password masked.
show_url() {
    echo "$1=${!1:-}" | sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#g'
}

# ---------------------------------------------------------------- checks

FAILED=()
exec {STDIN_FD}<&0 || exec {STDIN_FD}</dev/null # for the checks (pytest --pdb)

# run_check NAME COMMAND...: runs a check, records its failure, carries on.
# The check runs in the background (with the terminal's stdin and default
# Ctrl-C handling, as in the foreground) so that the signal traps above run at
# once instead of when the check ends.
run_check() {
    local name=$1 rc=0
    shift
    section "$name"
    (trap - INT && exec "$@" <&"$STDIN_FD") &
    CHECK_PID=$!
    wait "$CHECK_PID" || rc=$?
    CHECK_PID=
    if [ "$rc" -eq 0 ]; then
        echo "$name: passed"
    else
        [ "$name" = pytest ] && [ "$rc" -eq 5 ] && echo "pytest collected no tests"
        FAILED+=("$name (exit $rc)")
    fi
}

check_ruff() { .venv/bin/ruff check "${LINT_DIRS[@]}"; }
check_ruff_format() { .venv/bin/ruff format --check "${LINT_DIRS[@]}"; }
check_imports() { .venv/bin/lint-imports --no-cache; }
check_mypy() { .venv/bin/mypy; }
check_docs() { SA_INBOX_DOCS_OUT="$QUEUE_DIR/docs" scripts/docs.sh build; } # not in docs/: tests read it
check_artifacts() { scripts/check_dist.sh; }

# The queue of checks that need no server: they run one after another in one background
# process at nice 10, beside pytest (which waits on servers and brokers much of the time:
# they use the CPU it leaves), each to a log of its own printed once pytest has ended.
QUEUE_NAMES=()
QUEUE_FUNCTIONS=()
QUEUE_DIR=
QUEUE_PID=

# queue_check NAME FUNCTION: adds a check to the queue.
queue_check() {
    QUEUE_NAMES+=("$1")
    QUEUE_FUNCTIONS+=("$2")
}

start_queue() {
    [ ${#QUEUE_FUNCTIONS[@]} -gt 0 ] || return 0
    QUEUE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sa-inbox-checks.XXXXXX")
    (
        trap - INT TERM
        renice -n 10 -p "$BASHPID" >/dev/null
        local i rc
        for i in "${!QUEUE_FUNCTIONS[@]}"; do
            rc=0
            {
                echo "(started $SECONDS s into the run)"
                "${QUEUE_FUNCTIONS[$i]}" </dev/null
            } >"$QUEUE_DIR/$i.log" 2>&1 || rc=$?
            echo "$rc" >"$QUEUE_DIR/$i.rc"
        done
    ) &
    QUEUE_PID=$!
}

# Waits for the queue, prints each check's log and records its failure.
finish_queue() {
    [ -n "$QUEUE_PID" ] || return 0
    wait "$QUEUE_PID" || true
    QUEUE_PID=
    local i rc
    for i in "${!QUEUE_FUNCTIONS[@]}"; do
        section "${QUEUE_NAMES[$i]} (run beside pytest)"
        cat "$QUEUE_DIR/$i.log" 2>/dev/null || true
        rc=$(cat "$QUEUE_DIR/$i.rc" 2>/dev/null || echo "not run")
        if [ "$rc" = 0 ]; then
            echo "${QUEUE_NAMES[$i]}: passed"
        else
            FAILED+=("${QUEUE_NAMES[$i]} (exit $rc)")
        fi
    done
    rm -rf "$QUEUE_DIR"
}

# Those of the given paths that exist (ruff fails on missing paths).
existing_paths() {
    local dir
    for dir in "$@"; do
        [ -e "$dir" ] && echo "$dir"
    done
    return 0
}

# The pytest-xdist arguments, one a line: `-n N --dist loadgroup` (each worker has
# databases of its own, tests.support.parallel), none if the pytest arguments
# given choose the workers or the distribution themselves, turn xdist off, or
# debug (--pdb and --trace need one process).
xdist_arguments() {
    local arg workers=${SA_INBOX_TEST_WORKERS:-6}
    for arg in "$@"; do
        case "$arg" in
            -n | -n* | --numprocesses | --numprocesses=* | --dist | --dist=* | --pdb | --trace) return 0 ;;
            no:xdist | -pno:xdist | -p=no:xdist) return 0 ;;
        esac
    done
    [ "$workers" != 0 ] || return 0
    printf '%s\n' -n "$workers" --dist loadgroup
}

# ---------------------------------------------------------------- main

mapfile -t SERVERS < <(servers_needed)

if [ ${#SERVERS[@]} -gt 0 ]; then
    section "Servers: install (${SERVERS[*]})"
    scripts/servers.sh install "${SERVERS[@]}"
fi

section "Browser: install (chromium, chromium-driver)"
scripts/servers.sh install browser

section "Python environment (.venv)"
scripts/venv.sh '.[postgresql,mysql,oracle,test]'

if [ ${#SERVERS[@]} -gt 0 ]; then
    section "Servers: start (${SERVERS[*]})"
    start_servers "${SERVERS[@]}"
fi
for pair in "${SERVER_URLS[@]}"; do
    show_url "${pair#*:}"
    export "${pair#*:}"
done
export SA_INBOX_TEST_GALERA_DIR

# The checks that need no server run beside pytest (see queue_check).
if [ -z "${SA_INBOX_SKIP_LINT:-}" ]; then
    mapfile -t LINT_DIRS < <(existing_paths sa_inbox _sa_inbox_pytestplugin.py tests benchmarks scripts)
    queue_check "ruff" check_ruff
    queue_check "ruff format" check_ruff_format
    queue_check "import contracts" check_imports
    queue_check "mypy" check_mypy
else
    section "ruff, ruff format, import contracts, mypy: skipped (SA_INBOX_SKIP_LINT is set)"
fi
if [ -z "${SA_INBOX_SKIP_DOCS:-}" ] || [ "${CI:-}" = true ]; then
    queue_check "docs" check_docs
else
    section "docs: skipped (SA_INBOX_SKIP_DOCS is set)"
fi
if [ -z "${SA_INBOX_SKIP_DIST:-}" ] || [ "${CI:-}" = true ]; then
    queue_check "artifacts" check_artifacts
else
    section "artifacts: skipped (SA_INBOX_SKIP_DIST is set)"
fi
start_queue

mapfile -t XDIST < <(xdist_arguments "$@")
run_check pytest .venv/bin/python -m pytest --durations=30 "${XDIST[@]}" "$@"
finish_queue

section "Summary"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
fi
echo "all passed"
