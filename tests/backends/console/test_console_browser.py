"""The console in a real browser: Debian's chromium, headless, driven by selenium through
``/usr/bin/chromedriver`` (``scripts/servers.sh install browser``; nothing is downloaded),
against the app served by uvicorn on 127.0.0.1 and the live PostgreSQL.

The overview renders the database's rows; a dead letter is replayed through the forms and
then processed by a real store Worker (the business rows counted); an XSS payload renders
as text; a POST without the CSRF token, a replay without a session and a forged session are
refused; the app mounted under a path works the same.

Screenshots go to ``$SA_INBOX_CONSOLE_SCREENSHOTS`` (the docs' are made with
``SA_INBOX_CONSOLE_SCREENSHOTS=docs/_static/console``), else the test's temp directory.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.routing import Mount

from sa_inbox.console import Credentials, create_app
from tests.backends.console.conftest import PASSWORD, USER
from tests.conftest import backend_url, importorskip
from tests.support.console_app import ConsoleApp
from tests.support.store_app import make_engine

webdriver = importorskip("selenium.webdriver", "test")
uvicorn = importorskip("uvicorn", "console")

from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = [pytest.mark.backend, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
XSS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


@pytest.fixture
def capp(tmp_path: Path) -> Iterator[ConsoleApp]:
    engine = make_engine(backend_url("postgresql", tmp_path))
    app = ConsoleApp(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


class Served:
    """An ASGI app served by uvicorn in a thread on a loopback port of its own."""

    def __init__(self, app: Any) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped"
            assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.socket.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless chromium (Debian's) through Debian's chromedriver, a fresh profile."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        message = "no chromium/chromedriver: scripts/servers.sh install browser"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    driver.implicitly_wait(10)  # find_element waits for the page a click submitted
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("SA_INBOX_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / f"{name}.png"))


def console(capp: ConsoleApp, **kw: Any) -> Starlette:
    settings: dict[str, Any] = {
        "allow_replay": True,
        "auth": Credentials(user=USER, password=PASSWORD),
    }
    return create_app(capp.engine, **{**settings, **kw})


def log_in(driver: Any, base: str) -> None:
    driver.get(f"{base}/login")
    driver.find_element(By.ID, "user").send_keys(USER)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "login").click()
    driver.find_element(By.ID, "verdicts")  # waits for the overview (implicit wait)


def arrived(driver: Any, url: str) -> None:
    """Wait until the page a click opened is ``url``."""
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.current_url == url)


def fill(capp: ConsoleApp) -> dict[str, int]:
    ids = {}
    for n in range(4):
        capp.receive(f"pay-{n}", {"amount": 10 * (n + 1)})
    capp.claim("pay-0", "billing", {"amount": 10})
    ids["dead"] = capp.kill("pay-1", "ValueError: card declined (PSP code 51)")
    ids["xss"] = capp.receive("pay-xss", {"amount": 1, "note": XSS})
    capp.kill("pay-xss", f"KeyError: {XSS}")
    capp.receive("refund-1", {"amount": 5}, consumer="refunds")
    capp.publish("out-1", "payments.events", b'{"paid": true}')
    capp.publish("out-2", "payments.events", b"{}", "dead", "NOT_FOUND - no queue")
    return ids


def test_the_overview_renders_live_postgresql_data(
    capp: ConsoleApp, browser: Any, tmp_path: Path
) -> None:
    fill(capp)
    with Served(console(capp)) as base:
        log_in(browser, base)
        store = browser.find_element(By.ID, "store").text
        assert "billing 3 0 0 2" in store, store  # pending, processing, done, dead
        assert "refunds 1 0 0 0" in store
        assert "payments.events 1 0 0 1" in browser.find_element(By.ID, "outbox").text
        verdicts = browser.find_element(By.ID, "verdicts").text
        assert "[11 dead-letters]" in verdicts and "[17 outbox-dead]" in verdicts
        assert "postgresql" in browser.find_element(By.TAG_NAME, "h1").text
        shot(browser, "overview", tmp_path)
        browser.get(f"{base}/lookup?message_id=pay-0")
        assert "processed" in browser.find_element(By.ID, "verdict").text
        assert "billing" in browser.find_element(By.ID, "claims").text
        shot(browser, "lookup", tmp_path)


def test_a_dead_letter_replayed_in_the_browser_is_processed_by_a_worker(
    capp: ConsoleApp, browser: Any, tmp_path: Path
) -> None:
    ids = fill(capp)
    assert capp.work()["processed"] == 3, "the pending ones; the dead letters stay"
    assert capp.effect_ids() == ["pay-0", "pay-2", "pay-3"]
    with Served(console(capp)) as base:
        log_in(browser, base)
        browser.get(f"{base}/dead-letters?source=store&group=billing&error=declined")
        shot(browser, "dead-letters", tmp_path)
        browser.find_element(By.ID, f"select-{ids['dead']}").click()
        browser.find_element(By.ID, "replay-selected").click()
        assert browser.find_element(By.ID, "would-replay").text == "1"
        shot(browser, "confirm", tmp_path)
        assert capp.statuses()["pay-1"] == "dead", "the dry run changed nothing"
        browser.find_element(By.ID, "confirm").click()
        assert browser.find_element(By.ID, "replayed").text == "1"
    assert capp.statuses()["pay-1"] == "pending"
    assert capp.statuses()["pay-xss"] == "dead", "only the selected row"
    summary = capp.work()
    assert summary["processed"] == 1
    assert capp.effect_ids() == ["pay-0", "pay-1", "pay-2", "pay-3"]
    assert capp.row("pay-1")["status"] == "done"
    with capp.engine.connect() as conn:
        amount = conn.execute(
            sa.select(capp.effects.c.amount).where(capp.effects.c.message_id == "pay-1")
        ).scalar_one()
    assert amount == 20


def test_an_xss_payload_renders_inert(capp: ConsoleApp, browser: Any, tmp_path: Path) -> None:
    ids = fill(capp)
    with Served(console(capp)) as base:
        log_in(browser, base)
        pages = [f"/dead-letters/store/{ids['xss']}", "/dead-letters", "/lookup?message_id=pay-xss"]
        for page in pages:
            browser.get(base + page)  # returns once the page has loaded
            browser.implicitly_wait(0)  # no element is to be waited for: none may exist
            assert browser.title != "pwned", page
            assert browser.find_elements(By.TAG_NAME, "script") == []
            assert browser.find_elements(By.CSS_SELECTOR, "img") == []
            browser.implicitly_wait(10)
        browser.get(f"{base}/dead-letters/store/{ids['xss']}")
        assert (
            "<script>document.title='pwned'</script>" in browser.find_element(By.ID, "payload").text
        )
        assert browser.find_element(By.ID, "last-error").text.startswith("KeyError: <script>")
        shot(browser, "xss-inert", tmp_path)


def test_refused_without_csrf_token_session_or_with_a_forged_session(
    capp: ConsoleApp, browser: Any, tmp_path: Path
) -> None:
    ids = fill(capp)
    with Served(console(capp)) as base:
        log_in(browser, base)
        # a POST without the CSRF token (the field removed from the form)
        browser.get(f"{base}/dead-letters?source=store")
        browser.execute_script(
            "document.querySelectorAll('input[name=csrf_token]').forEach(e => e.remove())"
        )
        browser.find_element(By.ID, f"select-{ids['dead']}").click()
        browser.find_element(By.ID, "replay-selected").click()
        assert "CSRF token" in browser.find_element(By.ID, "error").text
        shot(browser, "csrf-refused", tmp_path)
        # a replay after the session is gone: sent to the login page, nothing replayed
        browser.get(f"{base}/dead-letters?source=store")
        browser.delete_cookie("sa_inbox_console_session")
        browser.find_element(By.ID, f"select-{ids['dead']}").click()
        browser.find_element(By.ID, "replay-selected").click()
        browser.find_element(By.ID, "login")  # the login page's button: waited for
        # a session signed with another key
        forged = console(capp, secret_key="an-attacker-key-0123456789")
        value = forged.state.sa_inbox_console.sessions.dump(USER)
        browser.add_cookie({"name": "sa_inbox_console_session", "value": value, "path": "/"})
        browser.get(f"{base}/dead-letters?source=store")
        assert browser.find_element(By.ID, "login").text == "Log in"
    assert capp.statuses()["pay-1"] == "dead"


def test_the_console_mounted_under_a_path(capp: ConsoleApp, browser: Any, tmp_path: Path) -> None:
    ids = fill(capp)
    host = Starlette(routes=[Mount("/ops/inbox", app=console(capp))])
    with Served(host) as root:
        base = f"{root}/ops/inbox"
        browser.get(f"{base}/dead-letters")  # redirected to the mounted login page
        assert browser.current_url.startswith(f"{base}/login")
        browser.find_element(By.ID, "user").send_keys(USER)
        browser.find_element(By.ID, "password").send_keys(PASSWORD)
        browser.find_element(By.ID, "login").click()
        browser.find_element(By.ID, "dead-letters")  # waited for
        assert browser.current_url == f"{base}/dead-letters"
        browser.find_element(By.LINK_TEXT, "Outbox dead letters").click()
        arrived(browser, f"{base}/dead-letters?source=outbox")
        assert "NOT_FOUND - no queue" in browser.find_element(By.ID, "dead-letters").text
        browser.find_element(By.LINK_TEXT, "Store dead letters").click()
        arrived(browser, f"{base}/dead-letters?source=store")
        browser.find_element(By.ID, f"open-{ids['dead']}").click()
        browser.find_element(By.ID, "replay-one").click()
        browser.find_element(By.ID, "confirm").click()
        assert browser.find_element(By.ID, "replayed").text == "1"
        css = browser.find_element(By.TAG_NAME, "header").value_of_css_property("background-color")
        assert css == "rgba(29, 43, 58, 1)", "the stylesheet loads under the mount path"
    assert capp.statuses()["pay-1"] == "pending"
    capp.work()
    assert "pay-1" in capp.effect_ids()
