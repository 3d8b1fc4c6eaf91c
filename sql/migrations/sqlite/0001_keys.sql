-- Version 1: the table of keys. Times are milliseconds since the Unix
-- epoch, read from the database's clock. state: 0 in flight, 1 uncertain,
-- 2 completed. idem_key holds the key's bytes, whatever they are (a NUL
-- included, which TEXT cannot hold). A row is absent once gone_ms has passed; an in-flight row
-- whose flight_ms has passed is uncertain (its claim expired).
CREATE TABLE {{table}} (
	idem_key   BLOB PRIMARY KEY,
	fp         BLOB NOT NULL,
	state      INTEGER NOT NULL,
	token      TEXT NOT NULL,
	flight_ms  INTEGER NOT NULL,
	gone_ms    INTEGER NOT NULL,
	has_result INTEGER NOT NULL DEFAULT 0,
	status     INTEGER,
	header     TEXT,
	body       BLOB
);
CREATE INDEX {{table}}_gone ON {{table}} (gone_ms);
