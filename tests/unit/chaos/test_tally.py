"""The tally of the consumers' settlement logs, torn last lines included."""

from __future__ import annotations

import io
import json
from pathlib import Path

from sa_inbox.brokers import DeadLetterReason, Delivery, Disposition, Settlement
from sa_inbox.chaos.consumer import ConsumerConfig, SettlementLog, record_line
from sa_inbox.chaos.tally import LogFollower, Tally, acked_ids, read_logs


def _settled(message_id: str, disposition: Disposition, count: int = 1) -> Settlement:
    reason = DeadLetterReason.DELIVERY_LIMIT if disposition is Disposition.DEAD_LETTERED else None
    return Settlement(disposition, Delivery(message_id, b"{}", delivery_count=count), reason)


def test_a_record_line_is_one_json_line() -> None:
    line = record_line(_settled("pay-1", Disposition.PROCESSED, 2))
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record["id"] == "pay-1"
    assert record["disposition"] == "processed"
    assert record["delivery_count"] == 2
    assert record["reason"] is None


def test_the_log_flushes_every_line() -> None:
    stream = io.StringIO()
    log = SettlementLog(stream)
    log(_settled("pay-1", Disposition.PROCESSED))
    log(_settled("pay-1", Disposition.DUPLICATE, 2))
    assert [json.loads(line)["disposition"] for line in stream.getvalue().splitlines()] == [
        "processed",
        "duplicate",
    ]


def test_the_tally_counts_each_disposition_and_redeliveries() -> None:
    tally = Tally()
    tally.add_lines(
        record_line(s)
        for s in (
            _settled("pay-1", Disposition.PROCESSED),
            _settled("pay-1", Disposition.DUPLICATE, 2),
            _settled("pay-2", Disposition.PROCESSED),
            _settled("poison-1", Disposition.RETRY),
            _settled("poison-1", Disposition.RETRY, 2),
            _settled("poison-1", Disposition.DEAD_LETTERED, 3),
        )
    )
    assert (tally.deliveries, tally.redeliveries) == (6, 3)
    assert (tally.processed, tally.duplicates, tally.retries) == (2, 1, 2)
    assert tally.dead_letters == {"poison-1": "delivery_limit"}
    assert tally.processed_ids == {"pay-1": 1, "pay-2": 1}
    assert tally.torn_lines == 0


def test_a_line_cut_by_a_kill_is_skipped(tmp_path: Path) -> None:
    complete = record_line(_settled("pay-1", Disposition.PROCESSED))
    torn = record_line(_settled("pay-2", Disposition.PROCESSED))[:25]
    (tmp_path / "consumer-0-1.jsonl").write_text(complete + torn)
    (tmp_path / "consumer-0-2.jsonl").write_text(
        record_line(_settled("pay-2", Disposition.PROCESSED, 2)) + "\n"
    )
    tally = read_logs([*sorted(tmp_path.glob("*.jsonl")), tmp_path / "missing.jsonl"])
    assert tally.torn_lines == 1
    assert tally.processed_ids == {"pay-1": 1, "pay-2": 1}
    assert (tally.deliveries, tally.redeliveries) == (2, 1)


def test_a_consumer_config_round_trips_through_its_command_line() -> None:
    from sa_inbox.chaos.consumer import _parser

    config = ConsumerConfig(
        broker="redis://127.0.0.1:6379/4",
        url="sqlite:////tmp/x.db",
        name="sa-inbox-chaos-x",
        log="/tmp/consumer-0-1.jsonl",
        max_deliveries=3,
        prefix="demo_",
        crash_after_commit=0.05,
        seed=7,
    )
    assert ConsumerConfig(**vars(_parser().parse_args(config.argv()))) == config


def test_the_follower_reads_complete_lines_as_they_are_appended(tmp_path: Path) -> None:
    follower = LogFollower(tmp_path)
    assert follower.poll() == 0
    first = tmp_path / "consumer-0-1.jsonl"
    processed = record_line(_settled("pay-1", Disposition.PROCESSED))
    retry = record_line(_settled("poison-1", Disposition.RETRY))
    half = record_line(_settled("pay-2", Disposition.DUPLICATE, 2))
    first.write_text(processed + retry + half[:10])
    assert follower.poll() == 2 and follower.final == 1  # the retry is not final
    assert follower.poll() == 0
    with first.open("a") as log:  # the line's writer finishes it
        log.write(half[10:])
    (tmp_path / "consumer-1-1.jsonl").write_text(
        record_line(_settled("poison-1", Disposition.DEAD_LETTERED, 3))
    )
    assert follower.poll() == 2 and follower.final == 3


def test_crash_lines_are_counted_apart_from_deliveries() -> None:
    tally = Tally()
    tally.add_lines(
        [
            json.dumps({"crash": "in_handler", "id": "pay-1", "pid": 1}),
            record_line(_settled("pay-1", Disposition.PROCESSED, 2)),
            json.dumps({"crash": "after_commit", "id": None, "pid": 2}),
            record_line(_settled("pay-2", Disposition.DUPLICATE, 2)),
        ]
    )
    assert tally.crashes == {"in_handler": 1, "after_commit": 1}
    assert (tally.deliveries, tally.processed, tally.duplicates) == (2, 1, 1)


def test_the_crashing_messages_are_a_share_chosen_by_the_seed() -> None:
    from sa_inbox.chaos.consumer import AFTER_COMMIT, IN_HANDLER, crash_chosen

    ids = [f"pay-{n}" for n in range(10_000)]
    chosen = [i for i in ids if crash_chosen(7, i, AFTER_COMMIT, 0.03)]
    assert 200 < len(chosen) < 400
    assert chosen == [i for i in ids if crash_chosen(7, i, AFTER_COMMIT, 0.03)]
    assert chosen != [i for i in ids if crash_chosen(8, i, AFTER_COMMIT, 0.03)]
    assert chosen != [i for i in ids if crash_chosen(7, i, IN_HANDLER, 0.03)]
    assert not any(crash_chosen(7, i, AFTER_COMMIT, 0.0) for i in ids)
    assert all(crash_chosen(7, i, AFTER_COMMIT, 1.0) for i in ids[:100])
    assert not crash_chosen(7, None, AFTER_COMMIT, 1.0)


def test_acked_ids_are_processed_or_duplicate_with_their_first_ack_time(tmp_path: Path) -> None:
    first, second = tmp_path / "consumer-0-1.jsonl", tmp_path / "consumer-1-1.jsonl"
    lines = [
        {"id": "pay-1", "disposition": "processed", "t": 5.0},
        {"id": "pay-2", "disposition": "retry", "t": 1.0},
        {"id": "pay-3", "disposition": "dead_lettered", "t": 2.0},
        {"crash": "after_commit", "id": "pay-4", "pid": 1},
    ]
    first.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"id": "pay-5", "di')
    second.write_text(json.dumps({"id": "pay-1", "disposition": "duplicate", "t": 3.0}) + "\n")
    assert acked_ids([first, second, tmp_path / "missing.jsonl"]) == {"pay-1": 3.0}
