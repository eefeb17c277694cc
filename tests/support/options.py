"""A consumer's keyword arguments with the shared settings gathered into its options."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sa_inbox.brokers import DeliveryOptions

#: The keyword arguments that are :class:`~sa_inbox.brokers.DeliveryOptions` fields.
FIELDS = frozenset(field.name for field in fields(DeliveryOptions))


def with_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for a consumer, its :class:`~sa_inbox.brokers.DeliveryOptions` fields
    (``max_deliveries``, ``dead_letter``, ``key_source``...) moved into ``options=``, on top
    of an ``options`` it already holds."""
    rest = {name: value for name, value in kwargs.items() if name not in FIELDS}
    shared = {name: value for name, value in kwargs.items() if name in FIELDS}
    if not shared:
        return rest
    base = rest.pop("options", None) or DeliveryOptions()
    rest["options"] = DeliveryOptions(**{**vars(base), **shared})
    return rest
