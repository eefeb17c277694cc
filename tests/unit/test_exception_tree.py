"""Every exception class of sa-inbox lives in :mod:`sa_inbox.exc`, and that module's docstring
draws their tree as it is.

The package is walked by importing each module (the lab packages, which keep their own
errors, excepted), so a class defined anywhere else fails here; the docstring's tree is
parsed and compared, class by class, with the real bases, so it cannot drift.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import sa_inbox
from sa_inbox import exc

#: The lab packages: tools around the library that keep their own errors.
LAB = ("sa_inbox.bench", "sa_inbox.chaos", "sa_inbox.demo", "sa_inbox.cli")

#: Exceptions that never leave the module defining them, with the reason.
PRIVATE = {
    # the reconnect loop's signal that aio-pika's queue iterator ended; caught by it
    ("sa_inbox.brokers.rabbitmq.aio", "_ChannelEnded"),
    # the Kafka poll's signal that one record's handler failed; caught by the poll runner
    ("sa_inbox.brokers.kafka.poll", "_HandlerFailed"),
}

ENTRY = re.compile(r"^(?P<indent> *)(?P<name>\w+)(?: \[(?P<bases>[\w, ]+)\])?$")


def _library_modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(sa_inbox.__path__, "sa_inbox.")
        if not info.name.startswith(LAB)
    ]
    for name in names:
        importlib.import_module(name)
    return names


def _exception_classes() -> dict[tuple[str, str], type[BaseException]]:
    """Every exception class defined by a module of the library, by (module, name)."""
    found: dict[tuple[str, str], type[BaseException]] = {}
    for module_name in ["sa_inbox", *_library_modules()]:
        for obj in vars(importlib.import_module(module_name)).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith("sa_inbox")
                and not obj.__module__.startswith(LAB)
            ):
                found[obj.__module__, obj.__qualname__] = obj
    return found


def _docstring_tree() -> dict[str, tuple[str, ...]]:
    """The docstring's tree as {class name: (first base, other bases...)}."""
    doc = exc.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    tree: dict[str, tuple[str, ...]] = {}
    parents: list[tuple[int, str]] = []
    for line in block.splitlines():
        entry = ENTRY.match(line)
        assert entry, f"not a tree entry: {line!r}"
        indent, name = len(entry["indent"]), entry["name"]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        parent = parents[-1][1] if parents else "Exception"
        others = tuple(b.strip() for b in (entry["bases"] or "").split(",") if b.strip())
        assert name not in tree, f"{name} drawn twice"
        tree[name] = (parent, *others)
        parents.append((indent, name))
    return tree


def _deprecated_aliases() -> list[str]:
    doc = exc.__doc__ or ""
    return re.findall(r"``(\w+)``", doc.split("Deprecated aliases", 1)[1])


def test_every_exception_of_the_library_is_defined_in_exc() -> None:
    elsewhere = {
        key for key in _exception_classes() if key[0] != "sa_inbox.exc" and key not in PRIVATE
    }

    assert not elsewhere, f"define these in sa_inbox.exc: {sorted(elsewhere)}"


def test_exc_exports_each_of_its_classes_once() -> None:
    defined = sorted(name for module, name in _exception_classes() if module == "sa_inbox.exc")

    assert exc.__all__ == defined
    assert all(issubclass(getattr(exc, name), exc.InboxError) for name in exc.__all__)


def test_the_docstring_tree_is_the_class_hierarchy() -> None:
    tree = _docstring_tree()
    real = {
        name: tuple(base.__name__ for base in getattr(exc, name).__bases__) for name in exc.__all__
    }

    assert tree == real


def test_the_deprecated_aliases_are_invalid_argument() -> None:
    aliases = _deprecated_aliases()
    bound = sorted(
        name
        for name, obj in vars(exc).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__name__ != name
    )

    assert aliases == bound
    assert all(getattr(exc, name) is exc.InvalidArgument for name in aliases)
    assert not set(aliases) & set(exc.__all__)


def test_invalid_argument_is_a_configuration_error_and_a_value_error() -> None:
    assert issubclass(exc.InvalidArgument, exc.ConfigurationError)
    assert issubclass(exc.InvalidArgument, ValueError)


#: The modules that defined exceptions before they all moved to sa_inbox.exc: their old
#: import paths still give the same class.
MOVED = {
    "sa_inbox.alembic.exc": [
        "AlembicSetupError",
        "InboxSettingsConflict",
        "InboxTableDropRefused",
        "InvalidTableOptions",
    ],
    "sa_inbox.brokers.dead_letters.model": ["SourceRefused"],
    "sa_inbox.brokers.nats.publisher": ["NoPubAckError"],
    "sa_inbox.brokers.process": ["DeliveryLimitExceeded"],
    "sa_inbox.brokers.rabbitmq.message": ["InvalidConsumerArgument"],
    "sa_inbox.brokers.redis.core": ["InvalidStreamSettings"],
    "sa_inbox.outbox.exc": [
        "AsyncPublisherInSyncRelay",
        "InvalidOutboxMessage",
        "InvalidRelayArgument",
    ],
    "sa_inbox.sharding.exc": [
        "InvalidShardKey",
        "InvalidShardMap",
        "ShardAssignmentFailed",
        "ShardKeyChanged",
        "ShardUnavailable",
        "UnknownShardIdentity",
        "WrongShard",
    ],
    "sa_inbox.store.protocol": ["HandlerFailed"],
}


def test_the_old_import_paths_give_the_same_classes() -> None:
    for module_name, names in MOVED.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert getattr(module, name) is getattr(exc, name), f"{module_name}.{name}"
