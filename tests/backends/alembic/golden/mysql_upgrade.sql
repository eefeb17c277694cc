CREATE TABLE alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> 5a1f0c0ffee5

CREATE TABLE inbox_processed_messages (
    message_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
    consumer_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
    received_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), 
    message_type VARCHAR(255), 
    correlation_id VARCHAR(255), 
    payload_hash TINYBLOB, 
    CONSTRAINT pk_inbox_processed_messages PRIMARY KEY (message_id, consumer_name)
)COMMENT='sa-inbox: messages already processed, one row per (message_id, consumer)';

CREATE INDEX ix_inbox_processed_messages_received_at ON inbox_processed_messages (received_at);

CREATE TABLE inbox_consumers (
    inbox_table VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
    consumer_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
    handler VARCHAR(512) NOT NULL, 
    registered_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, 
    CONSTRAINT pk_inbox_consumers PRIMARY KEY (inbox_table, consumer_name)
)COMMENT='sa-inbox: the handler that owns each consumer name';

INSERT INTO alembic_version (version_num) VALUES ('5a1f0c0ffee5');

