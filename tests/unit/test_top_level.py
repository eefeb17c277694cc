"""The top level of ``sa_inbox`` stays small: what most applications use, nothing else.

The names that left it resolve for one release from their module, each with a
DeprecationWarning that names the module; any other name is an AttributeError.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

import sa_inbox

#: The whole top level. A name is added here on purpose, or it lives in its module.
TOP_LEVEL = [
    "Backoff",
    "ConfigurationError",
    "DuplicateMessage",
    "Inbox",
    "InboxError",
    "InboxMessageMixin",
    "InboxStore",
    "Outcome",
    "Result",
    "RetentionPolicy",
    "TransientClaimError",
    "Worker",
    "handle",
    "idempotency_key",
    "install",
    "processed_messages_table",
    "purge",
    "register_claim",
    "run_in_transaction",
]

#: The deprecated aliases of InvalidArgument that the top level exported.
ALIASES = {
    "InvalidDeadLetterArgument",
    "InvalidKeySetting",
    "InvalidRetentionPolicy",
    "InvalidRetryArgument",
    "InvalidStoreArgument",
    "InvalidStrategy",
}


#: The top level of the previous release: every name of it still resolves.
PREVIOUS = [
    "AsyncHandlerError",
    "AutocommitConnection",
    "Backoff",
    "ClaimLost",
    "ClaimWarning",
    "ConfigurationError",
    "ConsumerNameTaken",
    "DatabaseUnavailable",
    "DeadLetterQueueUnavailable",
    "DuplicateMessage",
    "HandlerEndedTransaction",
    "Inbox",
    "InboxError",
    "InboxMessageMixin",
    "InboxStore",
    "Incoming",
    "InvalidBind",
    "InvalidDeadLetterArgument",
    "InvalidHandler",
    "InvalidKeySetting",
    "InvalidMessageId",
    "InvalidObject",
    "InvalidRetentionPolicy",
    "InvalidRetryArgument",
    "InvalidSessionFactory",
    "InvalidStoreArgument",
    "InvalidStrategy",
    "InvalidTable",
    "InvalidTableType",
    "MessageIdCollision",
    "MissingExtra",
    "MissingKeyHeader",
    "MissingTable",
    "Outcome",
    "PurgeLockTimeout",
    "Result",
    "RetentionPolicy",
    "RetentionWindowTooShort",
    "SplitTransaction",
    "StorePurgeResult",
    "StoredMessage",
    "SyncAsyncMismatch",
    "TransientClaimError",
    "UnsafePartitionKey",
    "UnsafeTransaction",
    "UnsupportedBackend",
    "UnsupportedBroker",
    "Worker",
    "handle",
    "idempotency_key",
    "install",
    "is_transient",
    "payload_hash",
    "processed_messages_table",
    "purge",
    "purge_store",
    "register_claim",
    "run_in_transaction",
]


def test_the_top_level_is_the_expected_names() -> None:
    assert sa_inbox.__all__ == TOP_LEVEL
    for name in TOP_LEVEL:
        assert getattr(sa_inbox, name) is not None


def test_star_import_gives_only_the_top_level() -> None:
    namespace: dict[str, object] = {}
    exec("from sa_inbox import *", namespace)

    assert sorted(set(namespace) - {"__builtins__"}) == sorted(TOP_LEVEL)


def test_every_name_of_the_previous_release_still_resolves() -> None:
    assert sorted(PREVIOUS) == sorted([*TOP_LEVEL, *sa_inbox._MOVED])


def test_a_moved_name_is_not_a_top_level_name() -> None:
    assert not set(sa_inbox._MOVED) & set(TOP_LEVEL)
    assert not set(sa_inbox._MOVED) & set(vars(sa_inbox))


@pytest.mark.parametrize("name", sorted(sa_inbox._MOVED))
def test_a_moved_name_warns_and_resolves_to_the_same_object(name: str) -> None:
    module = sa_inbox._MOVED[name]
    expected = getattr(importlib.import_module(module), name)
    new_name = "InvalidArgument" if name in ALIASES else name

    with pytest.warns(DeprecationWarning, match=rf"sa_inbox\.{name} .* {module}\.{new_name}$"):
        value = getattr(sa_inbox, name)

    assert value is expected


def test_from_import_of_a_moved_name_warns_at_the_import() -> None:
    with pytest.warns(DeprecationWarning, match=r"use sa_inbox\.exc\.InvalidMessageId"):
        from sa_inbox import InvalidMessageId  # noqa: F401


def test_an_unknown_name_is_an_attribute_error_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no_such_name"):
            sa_inbox.no_such_name  # type: ignore[attr-defined]  # noqa: B018
        assert not hasattr(sa_inbox, "InvalidArgument")
