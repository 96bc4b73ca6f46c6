-- Versioned facts (issue #20, facts.py): (subject, attribute, value) in a namespace, with four times as in Graphiti.
-- valid_at / invalid_at: when it was true in the world; recorded_at / expired_at: when the store came to hold this
-- belief and when it stopped holding it. A row is never rewritten but for expired_at (and an observation's count
-- and sources): a new value closes the old one by expiring its open-ended row and recording it again with its end,
-- so "what did we know on X" reads the rows recorded by X and not expired by X. Keys are normalised (case,
-- whitespace); `value` keeps the words it was given (values compare normalised).
CREATE TABLE facts (
    fact_id           TEXT PRIMARY KEY,
    namespace         TEXT NOT NULL,
    subject           TEXT NOT NULL,
    attribute         TEXT NOT NULL,
    value             TEXT NOT NULL,
    valid_at          TEXT NOT NULL,
    invalid_at        TEXT,
    recorded_at       TEXT NOT NULL,
    expired_at        TEXT,
    confidence        REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    observation_count INTEGER NOT NULL DEFAULT 1,
    sources           TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX facts_believed ON facts (namespace, subject, attribute, valid_at) WHERE expired_at IS NULL;
CREATE INDEX facts_recorded ON facts (namespace, subject, attribute, recorded_at);
