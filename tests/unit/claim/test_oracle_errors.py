"""Which Oracle driver errors are duplicates and which are transient.

python-oracledb's own exception classes (the ``[oracle]`` extra) are built with the payloads
the server sends; Oracle has no server here.
"""

from __future__ import annotations

import pytest

from sa_inbox import TransientClaimError
from sa_inbox.dialects import OracleClaim
from tests.conftest import importorskip
from tests.unit.claim.test_errors import TABLE, wrap

oracledb = importorskip("oracledb", "oracle")
_Error = importorskip("oracledb.errors", "oracle")._Error


def ora(code: int, message: str, cls: type[Exception] = oracledb.IntegrityError) -> object:
    return wrap(cls(_Error(message=message, code=code)))


@pytest.mark.parametrize(
    "message",
    [
        "ORA-00001: unique constraint (APP.PK_INBOX_PROCESSED_MESSAGES) violated",
        "ORA-00001: unique constraint (APP.PK_INBOX_PROCESSED_MESSAGES) violated on table "
        "APP.INBOX_PROCESSED_MESSAGES columns (MESSAGE_ID, CONSUMER_NAME)",
    ],
)
def test_oracle_duplicate_on_the_inbox_primary_key(message: str) -> None:
    assert OracleClaim().is_duplicate(ora(1, message), TABLE)  # type: ignore[arg-type]


def test_oracle_unique_violation_elsewhere_is_not_a_duplicate() -> None:
    other = ora(1, "ORA-00001: unique constraint (APP.UQ_LEDGER_REF) violated")
    assert not OracleClaim().is_duplicate(other, TABLE)  # type: ignore[arg-type]
    not_null = ora(1400, 'ORA-01400: cannot insert NULL into ("APP"."T"."X")')
    assert not OracleClaim().is_duplicate(not_null, TABLE)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", [8177, 60])
def test_oracle_transient(code: int) -> None:
    error = ora(code, f"ORA-{code:05d}: …", oracledb.DatabaseError)
    assert OracleClaim().is_transient(error)  # type: ignore[arg-type]
    with pytest.raises(TransientClaimError), OracleClaim().translate_errors():
        raise error  # type: ignore[misc]
