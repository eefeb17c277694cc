"""The inbox store's claim dialects, chosen by SQLAlchemy dialect name."""

from __future__ import annotations

from ..exc import UnsupportedBackend
from .mysql import MySQLStoreClaim
from .oracle import OracleStoreClaim
from .postgresql import PostgreSQLStoreClaim
from .sqlite import SQLiteStoreClaim
from .store_claim import StoreClaimDialect

__all__ = ["store_claim_dialect_for"]

_REGISTRY: dict[str, StoreClaimDialect] = {
    name: dialect
    for dialect in (
        PostgreSQLStoreClaim(),
        MySQLStoreClaim(),
        OracleStoreClaim(),
        SQLiteStoreClaim(),
    )
    for name in dialect.names
}


def store_claim_dialect_for(dialect_name: str) -> StoreClaimDialect:
    """The :class:`StoreClaimDialect` for ``engine.dialect.name``.

    :param dialect_name: ``"postgresql"``, ``"mysql"``, ``"mariadb"``, ``"oracle"`` or
        ``"sqlite"``.
    :raises UnsupportedBackend: for any other backend: a safe claim needs ``FOR UPDATE SKIP
        LOCKED`` or a single-writer database, which sa-inbox knows only on these.
    """
    dialect = _REGISTRY.get(dialect_name)
    if dialect is None:
        raise UnsupportedBackend(
            f"the inbox store's worker has no claim for {dialect_name!r}; supported: "
            f"{', '.join(sorted(_REGISTRY))}"
        )
    return dialect
