"""One database backend's dialects, as the registry in :mod:`sa_inbox.dialects` holds them."""

from __future__ import annotations

from dataclasses import dataclass

from ..exc import UnsupportedBackend
from .base import ClaimDialect
from .purge import PurgeDialect
from .store_claim import StoreClaimDialect

__all__ = ["Backend"]


@dataclass(frozen=True)
class Backend:
    """What sa-inbox does differently on one backend: one instance per backend module
    (``BACKEND``), registered once under each of its SQLAlchemy dialect names.

    Look one up with :func:`sa_inbox.dialects.backend_for`. The dialects are stateless and
    shared by every engine of the backend.
    """

    #: The SQLAlchemy dialect names (``engine.dialect.name``) this backend serves, e.g.
    #: ``("mysql", "mariadb")``.
    names: tuple[str, ...]
    #: The insert-or-skip claim of :class:`~sa_inbox.Inbox` and the inbox store's receive.
    claim: ClaimDialect
    #: The batched delete of :func:`~sa_inbox.purge` and :func:`~sa_inbox.retention.purge_store`.
    purge: PurgeDialect
    #: The inbox store's claim of stored messages, ``None`` where sa-inbox has none; read
    #: it through :attr:`store_claim`, which raises then.
    store_claim_dialect: StoreClaimDialect | None = None

    @property
    def store_claim(self) -> StoreClaimDialect:
        """The inbox store's claim of stored messages on this backend.

        :raises UnsupportedBackend: where sa-inbox has none (any backend but PostgreSQL,
            YugabyteDB, CockroachDB, MySQL/MariaDB, Oracle and SQLite): a safe claim needs
            ``FOR UPDATE SKIP LOCKED`` or a single-writer database, which sa-inbox knows only
            on these.
        """
        if self.store_claim_dialect is None:
            raise UnsupportedBackend(
                f"the inbox store's worker has no claim for {', '.join(map(repr, self.names))}; "
                "supported: PostgreSQL, YugabyteDB, CockroachDB, MySQL/MariaDB, Oracle, SQLite"
            )
        return self.store_claim_dialect
