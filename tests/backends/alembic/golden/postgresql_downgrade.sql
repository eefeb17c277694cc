BEGIN;

-- Running downgrade 5a1f0c0ffee5 -> 

DROP TABLE inbox_consumers;

DROP TABLE inbox_processed_messages;

DELETE FROM alembic_version WHERE alembic_version.version_num = '5a1f0c0ffee5';

COMMIT;

