"""install() must attach its listeners to every new sessionmaker, even one that SQLAlchemy's
event registry confuses with a freed one at the same address (found by the benchmark's
business-state check: 1010 ledger rows, 505 inbox rows)."""

from __future__ import annotations

import gc

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from sa_inbox import Inbox, install, register_claim
from sa_inbox.exc import ConfigurationError, InvalidSessionFactory
from sa_inbox.session import installed, uninstall


def test_every_new_sessionmaker_gets_the_listeners() -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    rounds = 500
    for i in range(rounds):
        factory = sessionmaker(engine)
        install(factory)
        with factory.begin() as session:
            register_claim(session, inbox, f"m{i}", "c")
        del factory, session
        if i % 100 == 0:
            gc.collect()
    with engine.connect() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar()
    assert count == rounds


def test_install_is_idempotent_and_uninstall_undoes_it() -> None:
    engine = sa.create_engine("sqlite://")
    factory = sessionmaker(engine)
    install(factory)
    install(factory)
    with factory() as session:
        assert installed(session)
    uninstall(factory)
    uninstall(factory)
    with factory() as session:
        assert not installed(session)
    with Session(engine) as session:
        assert not installed(session)


@pytest.mark.parametrize(
    ("target", "hint"),
    [
        (sessionmaker().begin, "not its .begin"),
        (Session.begin, "not its .begin"),
        (scoped_session(sessionmaker()), "on its session_factory"),
        (sa.create_engine("sqlite://"), "the sessionmaker bound to it"),
        (None, "the sessionmaker that makes"),
    ],
    ids=["sessionmaker.begin", "Session.begin", "scoped_session", "engine", "None"],
)
def test_install_refuses_what_it_cannot_mark(target: object, hint: str) -> None:
    with pytest.raises(InvalidSessionFactory, match=hint):
        install(target)  # type: ignore[arg-type]


def test_register_claim_without_a_transaction_is_a_configuration_error() -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    factory = sessionmaker(engine)
    install(factory)
    with factory() as session, pytest.raises(ConfigurationError, match="begun transaction"):
        register_claim(session, inbox, "m1", "c")
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar() == 0
