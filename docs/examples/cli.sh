#!/usr/bin/env bash
# The sa-inbox commands the how-to pages show (each page includes its section from here),
# run in this order by tests/docs/test_examples.py on a SQLite file whose tables
# retention.py made, and against the live Redis for the dead letters. Set DATABASE_URL
# (and REDIS_URL) to run it yourself.
set -euo pipefail

# [stats]
sa-inbox stats --url "$DATABASE_URL"                      # rich tables
sa-inbox stats --url "$DATABASE_URL" --json > stats.json  # for scripts
sa-inbox stats --url "$DATABASE_URL" --exact             # count every row (a full scan)
# a probe or a cron job: exit 0, or the code of the first thing to look at
sa-inbox stats --url "$DATABASE_URL" --check --retention 7d --pending-threshold 10m \
    --dead-letters "$REDIS_URL/payments:dead"
# [stats end]

# [purge]
sa-inbox purge --url "$DATABASE_URL" --max-redelivery 1d --max-replay 7d
sa-inbox purge --url "$DATABASE_URL" --max-redelivery 1d --max-replay 7d --store \
    --dead-older-than 30d                                 # done rows, and old dead ones
# [purge end]

# [store]
sa-inbox store counts --url "$DATABASE_URL"               # rows per status and consumer
sa-inbox store replay --url "$DATABASE_URL" --status dead --dry-run
# [store end]

# [dead-letters]
sa-inbox dead-letters count --broker "$REDIS_URL" --queue payments:dead
sa-inbox dead-letters list --broker "$REDIS_URL" --queue payments:dead --reason delivery_limit
sa-inbox dead-letters replay --broker "$REDIS_URL" --queue payments:dead --dry-run
sa-inbox dead-letters replay --broker "$REDIS_URL" --queue payments:dead --limit 100
# [dead-letters end]

# [growth]
sa-inbox bench growth --rate 2000 --window 7d             # rows and bytes the inbox will hold
# [growth end]
