"""Publish payments to the "payments" queue, each one TWICE, as a producer that retries."""

import json
import os
import sys

import pika

from sa_inbox.brokers.rabbitmq import declare_queue


def main(count):
    with pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"])) as connection:
        channel = connection.channel()
        declare_queue(channel, "payments")
        channel.confirm_delivery()
        for _copy in range(2):  # the producer retries every publish once
            for number in range(count):
                payment = {"account": f"acct-{number % 5}", "amount": 10}
                channel.basic_publish(
                    "",
                    "payments",
                    json.dumps(payment).encode(),
                    # the key: chosen by the producer, the same on every copy
                    pika.BasicProperties(message_id=f"payment-{number}", delivery_mode=2),
                )
    print(f"published {count} payments twice: {2 * count} messages")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
