CREATE TABLE alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> 5a1f0c0ffee5

CREATE TABLE inbox_processed_messages (
    message_id VARCHAR(255) NOT NULL, 
    consumer_name VARCHAR(255) NOT NULL, 
    received_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
    message_type VARCHAR(255), 
    correlation_id VARCHAR(255), 
    payload_hash BLOB, 
    CONSTRAINT pk_inbox_processed_messages PRIMARY KEY (message_id, consumer_name)
);

CREATE INDEX ix_inbox_processed_messages_received_at ON inbox_processed_messages (received_at);

CREATE TABLE inbox_consumers (
    inbox_table VARCHAR(128) NOT NULL, 
    consumer_name VARCHAR(255) NOT NULL, 
    handler VARCHAR(512) NOT NULL, 
    registered_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
    CONSTRAINT pk_inbox_consumers PRIMARY KEY (inbox_table, consumer_name)
);

INSERT INTO alembic_version (version_num) VALUES ('5a1f0c0ffee5') RETURNING version_num;

