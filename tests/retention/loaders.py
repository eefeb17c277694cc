"""Bulk loads of processed-message rows for the purge tests and the purge benchmark.

Row g (1..n) is ``old-g``, 10 days + (g mod 1 day) old, when g is even, else ``keep-g``, up
to 8 days old: half the rows are expired under a window between 8 and 10 days, and the two
halves interleave in both key order and time order. One ``INSERT … SELECT`` from the
server's own row generator (PostgreSQL ``generate_series``, MariaDB's Sequence engine
``seq_1_to_n`` or a recursive CTE on MySQL, SQLite's recursive CTE, Oracle ``CONNECT BY``).
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["LOADERS", "load_rows"]

#: Row g (1..n): 'old-g' 10 days + (g mod 1 day) old, or 'keep-g' up to 8 days old.
LOADERS = {
    "postgresql": """
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT CASE WHEN g % 2 = 0 THEN 'old-' || g ELSE 'keep-' || g END, 'billing',
               CASE WHEN g % 2 = 0
                    THEN now() - interval '10 days' - (g % 86400) * interval '1 second'
                    ELSE now() - (g % 691200) * interval '1 second' END
        FROM generate_series(1, :n) AS g""",
    "mysql": """
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT IF(MOD(seq, 2) = 0, CONCAT('old-', seq), CONCAT('keep-', seq)), 'billing',
               IF(MOD(seq, 2) = 0,
                  NOW() - INTERVAL 10 DAY - INTERVAL MOD(seq, 86400) SECOND,
                  NOW() - INTERVAL MOD(seq, 691200) SECOND)
        FROM {sequence}""",
    "sqlite": """
        WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < :n)
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT CASE WHEN g % 2 = 0 THEN 'old-' || g ELSE 'keep-' || g END, 'billing',
               CASE WHEN g % 2 = 0
                    THEN datetime('now', '-10 days', '-' || (g % 86400) || ' seconds')
                    ELSE datetime('now', '-' || (g % 691200) || ' seconds') END
        FROM seq""",
    "oracle": """
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT CASE WHEN MOD(LEVEL, 2) = 0 THEN 'old-' || LEVEL ELSE 'keep-' || LEVEL END,
               'billing',
               CASE WHEN MOD(LEVEL, 2) = 0
                    THEN SYSTIMESTAMP - NUMTODSINTERVAL(10, 'DAY')
                         - NUMTODSINTERVAL(MOD(LEVEL, 86400), 'SECOND')
                    ELSE SYSTIMESTAMP - NUMTODSINTERVAL(MOD(LEVEL, 691200), 'SECOND') END
        FROM dual CONNECT BY LEVEL <= :n""",
}


def load_rows(backend: str, engine: sa.Engine, table: str, rows: int) -> None:
    """Insert ``rows`` rows into ``table`` (which must exist), then ANALYZE on PostgreSQL."""
    sql = LOADERS[backend]
    with engine.begin() as conn:
        if backend == "mysql":
            if engine.dialect.is_mariadb:  # type: ignore[attr-defined]
                sequence = f"seq_1_to_{rows}"  # MariaDB's Sequence engine
            else:
                conn.exec_driver_sql(f"SET SESSION cte_max_recursion_depth = {rows}")
                sequence = "(WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 "
                sequence += f"FROM s WHERE seq < {rows}) SELECT seq FROM s) AS s"
            conn.execute(sa.text(sql.format(table=table, sequence=sequence)))
        else:
            conn.execute(sa.text(sql.format(table=table)), {"n": rows})
    if backend == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"ANALYZE {table}")
