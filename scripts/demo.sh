#!/usr/bin/env bash
# The demo of sa-inbox:   ./scripts/demo.sh [sa-inbox demo options...]
# Makes the virtualenv .venv with the project (and the drivers and clients the arguments
# name: a --url of postgresql:// or mysql:// / mariadb:// installs that driver; --broker
# amqp:// rabbitmq, redis:// redis, nats:// nats and the async database drivers NATS
# needs), if needed, quietly, then runs `sa-inbox demo` with the arguments given. The
# default demo, on embedded SQLite, needs nothing beyond the project.
set -euo pipefail

cd "$(dirname "$0")/.."
EXTRAS=()
for arg in "$@"; do
    case "$arg" in
        *postgresql:* | *postgresql+*) EXTRAS+=(postgresql) ;;
        *mysql:* | *mysql+* | *mariadb:* | *mariadb+*) EXTRAS+=(mysql) ;;
        *amqp://* | *amqps://*) EXTRAS+=(rabbitmq) ;;
        *redis://*) EXTRAS+=(redis) ;;
        *nats://*) EXTRAS+=(nats asyncpg aiomysql aiosqlite) ;;
    esac
done
SPEC=.
if [ ${#EXTRAS[@]} -gt 0 ]; then
    SPEC=".[$(IFS=,; echo "${EXTRAS[*]}")]"
fi
[ -x .venv/bin/python ] || echo "preparing .venv (first run only)..." >&2
if ! output=$(scripts/venv.sh "$SPEC" 2>&1); then
    printf '%s\n' "$output" >&2
    exit 1
fi
exec .venv/bin/sa-inbox demo "$@"
