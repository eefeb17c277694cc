"""The replication hazards drawn from a :class:`ReplicationState` (the live servers are in
``tests/backends/cluster/test_replication_check.py``)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sa_inbox.replication import (
    ReplicationState,
    Standby,
    read_replication,
    replication_unchecked,
    replication_warnings,
    required_sync_standbys,
)
from sa_inbox.stats import WARNING_CODES

SYNC, ASYNC, HIDDEN = (
    Standby("s1", "streaming", "sync"),
    Standby("s2", "streaming", "async"),
    Standby("walreceiver", None, None),  # as a role without pg_read_all_stats sees it
)


def kinds(
    names: str, standbys: list[Standby], commit: str = "on", recovery: bool = False
) -> list[str]:
    state = ReplicationState(recovery, names, commit, standbys)
    return [kind for kind, _ in replication_warnings(state)]


@pytest.mark.parametrize(
    ("names", "required"),
    [
        ("", 0),
        ("  ", 0),
        ("*", 1),
        ("s1, s2", 1),
        ("2 (s1, s2, s3)", 2),
        ("FIRST 2 (s1, s2)", 2),
        ("any 3 (*)", 3),
        ('"s1"', 1),
    ],
)
def test_required_sync_standbys_follows_the_setting_grammar(names: str, required: int) -> None:
    assert required_sync_standbys(names) == required


def test_a_lone_server_has_no_warning() -> None:
    assert kinds("", []) == []


def test_a_synchronous_standby_is_healthy() -> None:
    assert kinds("*", [SYNC]) == []
    assert kinds("*", [SYNC, ASYNC], commit="remote_apply") == []


def test_standbys_without_a_synchronous_one_warn() -> None:
    assert kinds("", [ASYNC]) == ["async-standbys"]
    assert kinds("", [ASYNC, ASYNC]) == ["async-standbys"]


def test_a_local_commit_level_does_not_wait_for_the_synchronous_standby() -> None:
    assert kinds("*", [SYNC], commit="local") == ["async-standbys"]
    assert kinds("*", [SYNC], commit="off") == ["async-standbys"]


def test_synchronous_names_without_the_standbys_hang_commits() -> None:
    assert kinds("*", []) == ["sync-standby-missing"]
    assert kinds("2 (s1, s2)", [SYNC, ASYNC]) == ["sync-standby-missing"]
    assert kinds("nobody", [ASYNC]) == ["sync-standby-missing", "async-standbys"]
    assert kinds("*", [], commit="local") == []  # commits do not wait


def test_a_standby_with_synchronous_names_would_hang_once_promoted() -> None:
    assert kinds("*", [], recovery=True) == ["sync-standby-missing"]
    assert kinds("", [ASYNC], recovery=True) == []  # cascading standbys are always async


def unchecked(names: str, standbys: list[Standby], commit: str = "on") -> str | None:
    return replication_unchecked(ReplicationState(False, names, commit, standbys))


def test_hidden_standbys_with_empty_names_are_asynchronous() -> None:
    # pg_stat_replication shows a role without pg_read_all_stats one row per standby with
    # NULL details: an empty synchronous_standby_names alone proves none is synchronous.
    assert kinds("", [HIDDEN]) == ["async-standbys"]
    assert kinds("", [HIDDEN, HIDDEN]) == ["async-standbys"]
    assert unchecked("", [HIDDEN]) is None


def test_hidden_standbys_with_a_local_commit_level_do_not_make_commits_wait() -> None:
    assert kinds("*", [HIDDEN], commit="local") == ["async-standbys"]
    assert unchecked("*", [HIDDEN], commit="off") is None


def test_fewer_hidden_standbys_than_required_hang_commits() -> None:
    assert kinds("2 (s1, s2)", [HIDDEN]) == ["sync-standby-missing"]
    state = ReplicationState(False, "2 (s1, s2)", "on", [HIDDEN])
    assert "at most 1 connected" in replication_warnings(state)[0][1]
    assert unchecked("2 (s1, s2)", [HIDDEN]) is None


def test_hidden_standbys_with_synchronous_names_leave_the_check_incomplete() -> None:
    assert kinds("*", [HIDDEN]) == []
    assert kinds("FIRST 2 (*)", [HIDDEN, HIDDEN]) == []
    for names, standbys in (("*", [HIDDEN]), ("FIRST 2 (*)", [HIDDEN, HIDDEN])):
        text = unchecked(names, standbys)
        assert text is not None and "could not be completed" in text
        assert "pg_read_all_stats" in text and "28.2.3" in text and "22.5" in text


def test_visible_or_absent_standbys_leave_nothing_unchecked() -> None:
    for names in ("", "*"):
        assert unchecked(names, []) is None
        assert unchecked(names, [SYNC]) is None
        assert unchecked(names, [ASYNC]) is None
    recovering = ReplicationState(True, "*", "on", [HIDDEN])
    assert replication_unchecked(recovering) is None


def test_the_codes_follow_the_older_ones() -> None:
    assert WARNING_CODES["sync-standby-missing"] == 14
    assert WARNING_CODES["async-standbys"] == 15
    assert WARNING_CODES["replication-unchecked"] == 16
    assert len(set(WARNING_CODES.values())) == len(WARNING_CODES)


def test_other_backends_have_no_replication_state() -> None:
    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        assert read_replication(conn) is None
    engine.dispose()
