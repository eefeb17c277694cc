"""The console's pages and their JSON API on each database (Starlette's TestClient): the
overview reads what ``sa-inbox stats --check`` reads, the lookup finds a message in every
table, the dead-letter lists filter and page, and a replay through the forms (dry-run
count, confirmation) is processed by a real store Worker."""

from __future__ import annotations

import datetime
import html
import logging
import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from sa_inbox import stats as stats_module
from sa_inbox.collision import payload_hash
from sa_inbox.console import Credentials, create_app
from sa_inbox.stats import WARNING_CODES
from tests.backends.console.conftest import BEARER, TOKEN
from tests.support.console_app import ConsoleApp, ago, csrf_token

pytestmark = pytest.mark.backend


def client(capp: ConsoleApp, **kw: Any) -> TestClient:
    """A client of a console that allows replays, logged in with the token (a session
    cookie, as a browser), base URL http://127.0.0.1."""
    settings: dict[str, Any] = {"allow_replay": True, "auth": Credentials(token=TOKEN)}
    app = create_app(capp.engine, **{**settings, **kw})
    c = TestClient(app, base_url="http://127.0.0.1", follow_redirects=False)
    page = c.get("/login")
    done = c.post(
        "/login", data={"user": "x", "password": TOKEN, "csrf_token": csrf_token(page.text)}
    )
    assert done.status_code == 303, done.text
    return c


def fill(capp: ConsoleApp) -> dict[str, int]:
    """Rows in every state: processed claims, pending / done / dead store rows of two
    consumers, outbox rows pending and dead."""
    ids = {}
    capp.claim("m-done", "billing", {"amount": 5})
    capp.claim("m-done", "audit", {"amount": 5})
    ids["done"] = capp.receive("m-done", {"amount": 5})
    capp.kill("m-done", "never")  # then made done below
    with capp.engine.begin() as conn:
        t = capp.store.table
        conn.execute(t.update().where(t.c.id == ids["done"]).values(status="done", last_error=None))
    ids["pending"] = capp.receive("m-pending", {"amount": 1})
    for n in range(3):
        capp.receive(f"m-dead-{n}", {"amount": 10 + n})
        ids[f"dead-{n}"] = capp.kill(f"m-dead-{n}", f"ValueError: card declined #{n}")
    capp.receive("m-other", {"amount": 100}, consumer="refunds")
    ids["other"] = capp.kill("m-other", "TimeoutError: psp", consumer="refunds")
    ids["out-dead"] = capp.publish("o-dead", "payments", b"{}", "dead", "broker refused")
    capp.publish("o-pending", "payments", b"{}")
    return ids


def test_the_overview_shows_what_stats_check_reads(capp: ConsoleApp) -> None:
    fill(capp)
    capp.receive("m-old", {"amount": 0}, consumer="refunds", now=ago(days=2, hours=12))
    capp.receive("m-older", {"amount": 0}, consumer="refunds", now=ago(days=9))
    c = client(capp)
    data = c.get("/api/overview").json()
    store = {s["consumer_name"]: s["counts"] for s in data["store"]["consumers"]}
    assert store == {
        "billing": {"pending": 1, "processing": 0, "done": 1, "dead": 3},
        "refunds": {"pending": 2, "processing": 0, "done": 0, "dead": 1},
    }
    assert {c["consumer_name"]: c["rows"] for c in data["consumers"]} == {"audit": 1, "billing": 1}
    outbox = {d["destination"]: d["counts"] for d in data["outbox"]["destinations"]}
    assert outbox == {"payments": {"pending": 1, "processing": 0, "dispatched": 0, "dead": 1}}
    kinds = {w["kind"] for w in data["warnings"]}
    assert {"dead-letters", "outbox-dead"} <= kinds
    assert data["exit_code"] == min(WARNING_CODES[k] for k in kinds)
    growth = {(g["table"], g["group"]): g["rows"] for g in data["growth"]}
    assert growth[("inbox_store", "billing")] == [5, 0, 0, 0, 0, 0, 0]
    assert growth[("inbox_store", "refunds")] == [1, 0, 1, 0, 0, 0, 0], "9 days ago: not shown"
    assert growth[("inbox_processed_messages", "audit")][0] == 1
    assert growth[("outbox_messages", "payments")][0] == 2
    page = c.get("/")
    assert page.status_code == 200
    for text in ("refunds", "payments", "[11 dead-letters]", "[17 outbox-dead]", "card declined"):
        assert text in page.text


def test_the_overview_marks_the_estimates_of_a_sampled_table(
    capp: ConsoleApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table taken for a large one (EXACT_BELOW lowered to 0) is estimated: its figures
    carry ``~`` on the page and ``estimated`` in the API, as in ``sa-inbox stats``."""
    if capp.engine.dialect.name == "sqlite":
        pytest.skip("SQLite is always counted")
    fill(capp)
    monkeypatch.setattr(stats_module, "EXACT_BELOW", 0)
    c = client(capp)
    data = c.get("/api/overview").json()
    inbox = next(t for t in data["tables"] if t["name"] == "inbox_processed_messages")
    assert inbox["estimated"] and data["sampled_rows"] > 0
    assert {tuple(c["estimated"]) for c in data["consumers"]} == {("rows",)}
    page = c.get("/").text
    assert "~ estimated" in page and f">~{inbox['rows']}<" in page


def test_the_lookup_finds_a_message_in_every_table(capp: ConsoleApp) -> None:
    fill(capp)
    capp.publish("m-done", "receipts", b"receipt")
    c = client(capp)
    found = c.get("/api/lookup", params={"message_id": "m-done"}).json()
    assert found["found"] is True
    assert [x["consumer_name"] for x in found["claims"]] == ["audit", "billing"]
    digest = payload_hash({"amount": 5}).hex()
    assert {x["payload_hash"] for x in found["claims"]} == {digest}
    (stored,) = found["stored"]
    assert (stored["status"], stored["consumer_name"], stored["payload_hash"]) == (
        "done",
        "billing",
        digest,
    )
    (published,) = found["published"]
    assert (published["destination"], published["payload_hash"]) == (
        "receipts",
        payload_hash(b"receipt").hex(),
    )
    dead = c.get("/api/lookup", params={"message_id": "m-dead-1"}).json()
    assert dead["claims"] == []
    assert dead["stored"][0]["last_error"] == "ValueError: card declined #1"
    assert dead["stored"][0]["attempts"] == 5
    assert c.get("/api/lookup", params={"message_id": "nope"}).json()["found"] is False
    assert c.get("/api/lookup").status_code == 400
    page = c.get("/lookup", params={"message_id": "m-done"})
    assert "m-done:\nprocessed" in page.text.replace("  ", "")
    missing = c.get("/lookup", params={"message_id": "nope"})
    assert "not found in any table" in missing.text


def test_dead_letters_are_filtered_and_paged_with_bound_parameters(capp: ConsoleApp) -> None:
    ids = fill(capp)
    c = client(capp)

    def listed(**params: Any) -> list[int]:
        response = c.get("/api/dead-letters", params=params)
        assert response.status_code == 200, response.text
        return [d["id"] for d in response.json()["dead_letters"]]

    every = [ids["other"], ids["dead-2"], ids["dead-1"], ids["dead-0"]]
    assert listed() == every
    assert listed(group="billing") == every[1:]
    assert listed(error="declined #1") == [ids["dead-1"]]
    assert listed(error="%") == [], "a LIKE wildcard is text, not a pattern"
    assert listed(group="x' OR '1'='1") == []
    assert listed(below_id=ids["dead-2"]) == every[2:]
    soon = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    assert listed(**{"from": soon}) == []
    assert listed(**{"from": ago(hours=1).isoformat(), "before": soon}) == every
    assert listed(source="outbox") == [ids["out-dead"]]
    assert c.get("/api/dead-letters", params={"source": "nope"}).status_code == 400
    assert c.get("/api/dead-letters", params={"from": "yesterday"}).status_code == 400
    page = c.get("/dead-letters", params={"group": "refunds"})
    assert "TimeoutError: psp" in page.text and "card declined" not in page.text


def test_a_dead_letter_detail_shows_its_error_and_payload(capp: ConsoleApp) -> None:
    ids = fill(capp)
    c = client(capp)
    row = c.get(f"/api/dead-letters/store/{ids['dead-0']}").json()
    assert (row["status"], row["last_error"], row["message_id"]) == (
        "dead",
        "ValueError: card declined #0",
        "m-dead-0",
    )
    assert '"amount": 10' in row["payload_text"]
    out = c.get(f"/api/dead-letters/outbox/{ids['out-dead']}").json()
    assert (out["destination"], out["last_error"]) == ("payments", "broker refused")
    assert c.get("/api/dead-letters/store/999999").status_code == 404
    assert c.get("/api/dead-letters/nope/1").status_code == 400
    page = c.get(f"/dead-letters/store/{ids['dead-0']}")
    assert "card declined #0" in page.text and 'id="replay-one"' in page.text


def preview(c: TestClient, page: str, data: dict[str, Any]) -> str:
    """POST the replay form of ``page`` (its CSRF token) with ``data``: the confirmation."""
    token = csrf_token(c.get(page).text)
    response = c.post("/replay", data={**data, "csrf_token": token})
    assert response.status_code == 200, response.text
    return response.text


def confirm(c: TestClient, confirmation: str, again: bool = False) -> Any:
    """Submit the confirmation form of a confirmation page."""
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', confirmation)
    data: dict[str, list[str]] = {}
    for name, value in fields:
        data.setdefault(name, []).append(html.unescape(value))
    data["csrf_token"] = data["csrf_token"][:1]
    if again:
        data["again"] = ["yes"]
    return c.post("/replay", data=data)


def test_a_dead_letter_replayed_through_the_forms_is_processed_by_a_worker(
    capp: ConsoleApp, caplog: pytest.LogCaptureFixture
) -> None:
    ids = fill(capp)
    c = client(capp)
    selected = {"source": "store", "scope": "selected", "id": [ids["dead-0"], ids["dead-2"]]}
    confirmation = preview(c, "/dead-letters", selected)
    assert 'id="would-replay">2<' in confirmation
    assert capp.statuses()["m-dead-0"] == "dead", "a preview changes nothing"
    with caplog.at_level(logging.INFO, logger="sa_inbox.console"):
        done = confirm(c, confirmation)
    assert done.status_code == 200 and 'id="replayed">2<' in done.text
    assert any(
        r.__dict__.get("user") == "token" and r.__dict__.get("replayed") == 2
        for r in caplog.records
    )
    statuses = capp.statuses()
    assert (statuses["m-dead-0"], statuses["m-dead-1"], statuses["m-dead-2"]) == (
        "pending",
        "dead",
        "pending",
    )
    summary = capp.work()
    assert summary["processed"] == 3  # the two replayed and m-pending
    assert capp.effect_ids() == ["m-dead-0", "m-dead-2", "m-pending"]
    assert capp.balance() == 10 + 12 + 1
    assert capp.statuses()["m-dead-0"] == "done"


def test_a_replay_by_filter_confirms_its_count_again_when_it_changed(capp: ConsoleApp) -> None:
    fill(capp)
    c = client(capp)
    chosen = {"source": "store", "scope": "filter", "group": "billing", "error": "declined"}
    confirmation = preview(c, "/dead-letters?group=billing", chosen)
    assert 'id="would-replay">3<' in confirmation
    capp.receive("m-dead-late", {"amount": 7})
    capp.kill("m-dead-late", "ValueError: card declined late")
    again = confirm(c, confirmation)
    assert 'id="changed"' in again.text and 'id="would-replay">4<' in again.text
    assert "pending" not in {capp.statuses()[f"m-dead-{n}"] for n in range(3)}
    done = confirm(c, again.text)
    assert 'id="replayed">4<' in done.text
    assert capp.statuses()["m-other"] == "dead", "another consumer's dead letter stays"
    capp.work()
    assert capp.effect_ids() == ["m-dead-0", "m-dead-1", "m-dead-2", "m-dead-late", "m-pending"]


def test_replaying_a_processed_message_needs_the_extra_confirmation(capp: ConsoleApp) -> None:
    ids = fill(capp)
    c = client(capp)
    one = {"source": "store", "scope": "selected", "id": ids["done"], "status": "any"}
    confirmation = preview(c, f"/dead-letters/store/{ids['done']}", one)
    assert 'id="finished">1<' in confirmation
    refused = confirm(c, confirmation)
    assert 'id="needs-again"' in refused.text
    assert capp.statuses()["m-done"] == "done"
    done = confirm(c, confirmation, again=True)
    assert 'id="replayed">1<' in done.text
    capp.work()
    assert capp.effect_ids() == ["m-done", "m-pending"]


def test_the_replay_api_counts_confirms_and_replays(capp: ConsoleApp) -> None:
    ids = fill(capp)
    c = TestClient(create_app(capp.engine, allow_replay=True, auth=Credentials(token=TOKEN)))
    api = "/api/replay"
    dry = c.post(api, json={"source": "store", "status": "dead", "dry_run": True}, headers=BEARER)
    assert dry.json() == {
        "dry_run": True, "chosen": 4, "finished": 0, "replayed": None, "needs_confirmation": False,
    }  # fmt: skip
    stale = c.post(api, json={"source": "store", "status": "dead", "expected": 3}, headers=BEARER)
    assert stale.status_code == 409 and stale.json()["chosen"] == 4
    done_row = {"source": "store", "ids": [ids["done"]], "status": None}
    refused = c.post(api, json=done_row, headers=BEARER)
    assert refused.status_code == 409 and refused.json()["needs_confirmation"] is True
    assert capp.statuses()["m-done"] == "done"
    # the CLI's rules: no row filter, or a status that cannot be replayed, is refused
    none = c.post(api, json={"source": "store", "status": None}, headers=BEARER)
    assert none.status_code == 400 and "needs ids, a status or a time range" in none.json()["error"]
    unnamed = c.post(api, json={"source": "store"}, headers=BEARER)
    assert unnamed.status_code == 400 and "name the rows to replay" in unnamed.json()["error"]
    assert capp.statuses()["m-other"] == "dead"
    bad = c.post(api, json={"source": "store", "status": "pending"}, headers=BEARER)
    assert bad.status_code == 400
    assert c.post(api, json={"source": "store", "ids": "12"}, headers=BEARER).status_code == 400
    outbox = c.post(api, json={"source": "outbox", "ids": [ids["out-dead"]]}, headers=BEARER)
    assert outbox.json()["replayed"] == 1
    assert capp.outbox_status("o-dead") == "pending"
    billing = {"source": "store", "group": "billing", "expected": 3}
    assert c.post(api, json=billing, headers=BEARER).json()["replayed"] == 3
    assert capp.statuses()["m-other"] == "dead"
