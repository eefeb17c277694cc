BEGIN;

CREATE TABLE alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> 5a1f0c0ffee5

CREATE TABLE inbox_processed_messages (
    message_id VARCHAR(255) NOT NULL, 
    consumer_name VARCHAR(255) NOT NULL, 
    received_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP NOT NULL, 
    message_type VARCHAR(255), 
    correlation_id VARCHAR(255), 
    payload_hash BYTEA, 
    CONSTRAINT pk_inbox_processed_messages PRIMARY KEY (message_id, consumer_name)
);

CREATE INDEX ix_inbox_processed_messages_received_at ON inbox_processed_messages (received_at);

COMMENT ON TABLE inbox_processed_messages IS 'sa-inbox: messages already processed, one row per (message_id, consumer)';

CREATE TABLE inbox_consumers (
    inbox_table VARCHAR(128) NOT NULL, 
    consumer_name VARCHAR(255) NOT NULL, 
    handler VARCHAR(512) NOT NULL, 
    registered_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP NOT NULL, 
    CONSTRAINT pk_inbox_consumers PRIMARY KEY (inbox_table, consumer_name)
);

COMMENT ON TABLE inbox_consumers IS 'sa-inbox: the handler that owns each consumer name';

INSERT INTO alembic_version (version_num) VALUES ('5a1f0c0ffee5') RETURNING alembic_version.version_num;

COMMIT;

