"""The outbox's exceptions, defined in :mod:`sa_inbox.exc` and re-exported here so that this
import path keeps working (``InvalidRelayArgument`` is a deprecated alias of
:class:`~sa_inbox.exc.InvalidArgument`)."""

from __future__ import annotations

from ..exc import AsyncPublisherInSyncRelay as AsyncPublisherInSyncRelay
from ..exc import InvalidOutboxMessage as InvalidOutboxMessage
from ..exc import InvalidRelayArgument as InvalidRelayArgument

__all__ = ["AsyncPublisherInSyncRelay", "InvalidOutboxMessage"]
