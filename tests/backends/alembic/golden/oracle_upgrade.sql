CREATE TABLE alembic_version (
    version_num VARCHAR2(32 CHAR) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)

/

-- Running upgrade  -> 5a1f0c0ffee5

CREATE TABLE inbox_processed_messages (
    message_id VARCHAR2(255 CHAR) NOT NULL, 
    consumer_name VARCHAR2(255 CHAR) NOT NULL, 
    received_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP NOT NULL, 
    message_type VARCHAR2(255 CHAR), 
    correlation_id VARCHAR2(255 CHAR), 
    payload_hash BLOB, 
    CONSTRAINT pk_inbox_processed_messages PRIMARY KEY (message_id, consumer_name)
)

/

CREATE INDEX ix_inbox_processed_messages_received_at ON inbox_processed_messages (received_at)

/

COMMENT ON TABLE inbox_processed_messages IS 'sa-inbox: messages already processed, one row per (message_id, consumer)'

/

CREATE TABLE inbox_consumers (
    inbox_table VARCHAR2(128 CHAR) NOT NULL, 
    consumer_name VARCHAR2(255 CHAR) NOT NULL, 
    handler VARCHAR2(512 CHAR) NOT NULL, 
    registered_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP NOT NULL, 
    CONSTRAINT pk_inbox_consumers PRIMARY KEY (inbox_table, consumer_name)
)

/

COMMENT ON TABLE inbox_consumers IS 'sa-inbox: the handler that owns each consumer name'

/

INSERT INTO alembic_version (version_num) VALUES ('5a1f0c0ffee5') RETURNING alembic_version.version_num INTO :ret_0

/

