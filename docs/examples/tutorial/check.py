"""Wait until the queue is drained, then check the ledger: each payment applied once."""

import os
import sys
import time

import pika
import sqlalchemy as sa
from payments import engine, ledger


def queue_is_empty():
    with pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"])) as connection:
        declared = connection.channel().queue_declare("payments", passive=True)
        return declared.method.message_count == 0


expected = int(sys.argv[1]) if len(sys.argv) > 1 else 100
deadline = time.monotonic() + 120
while not queue_is_empty() and time.monotonic() < deadline:
    time.sleep(0.5)
time.sleep(2)  # the last deliveries the consumer holds: handled, committed, acked

with engine.connect() as connection:
    rows = connection.scalar(sa.select(sa.func.count()).select_from(ledger))
    payments = connection.scalar(sa.select(sa.func.count(sa.distinct(ledger.c.payment_id))))
    total = connection.scalar(sa.select(sa.func.coalesce(sa.func.sum(ledger.c.amount), 0)))
print(f"ledger rows: {rows}, distinct payments: {payments}, total amount: {total}")
if (rows, payments, total) != (expected, expected, 10 * expected):
    sys.exit(f"expected {expected} rows, {expected} payments, total {10 * expected}")
