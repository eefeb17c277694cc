#!/usr/bin/env bash
# The commands of the tutorial (docs/tutorial.md includes each step from here), run in this
# order by tests/docs/test_tutorial.py against the live servers (it puts their URLs in the
# two lines of step 1). Run it yourself from this directory, with your URLs in step 1.
set -euo pipefail

# [step 1]
export DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/tutorial
export AMQP_URL=amqp://guest:guest@127.0.0.1:5672/
# [step 1 end]

# [step 3]
python payments.py
# [step 3 end]

# [step 4]
python consumer.py > consumer.log 2>&1 &
CONSUMER=$!
# [step 4 end]

# [step 5]
python producer.py 100
python check.py 100
# [step 5 end]

# [step 6]
python producer.py 50        # payments 0..49 again, each twice: all duplicates
kill -9 $CONSUMER            # crash the consumer, whatever it is doing
python consumer.py >> consumer.log 2>&1 &
CONSUMER=$!
python check.py 100          # still 100 rows: nothing applied twice
# [step 6 end]

# [step 7]
sa-inbox stats --url "$DATABASE_URL"
kill $CONSUMER
wait $CONSUMER || true
# [step 7 end]
