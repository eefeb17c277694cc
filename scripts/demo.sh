#!/usr/bin/env bash
# The demo of sa-inbox:   ./scripts/demo.sh [sa-inbox demo options...]
# Makes the virtualenv .venv with the project and the PostgreSQL and MySQL drivers (and,
# with --broker URL, that broker's client: amqp:// rabbitmq, redis:// redis, nats:// nats
# and the async database drivers NATS needs), if needed, quietly, then runs
# `sa-inbox demo` with the arguments given.
set -euo pipefail

cd "$(dirname "$0")/.."
EXTRAS=postgresql,mysql
for arg in "$@"; do
    case "$arg" in
        *amqp://* | *amqps://*) EXTRAS+=,rabbitmq ;;
        *redis://*) EXTRAS+=,redis ;;
        *nats://*) EXTRAS+=,nats,asyncpg,aiomysql,aiosqlite ;;
    esac
done
[ -x .venv/bin/python ] || echo "preparing .venv (first run only)..." >&2
if ! output=$(scripts/venv.sh ".[$EXTRAS]" 2>&1); then
    printf '%s\n' "$output" >&2
    exit 1
fi
exec .venv/bin/sa-inbox demo "$@"
