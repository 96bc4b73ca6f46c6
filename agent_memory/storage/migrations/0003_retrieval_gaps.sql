-- A retrieval that found nothing relevant opens a gap on its topic (issue #3); the save decision (issue #4)
-- judges a turn close to an open gap more leniently, and a memory that fills it closes it.
CREATE TABLE retrieval_gaps (
    gap_id       TEXT PRIMARY KEY,
    namespace    TEXT NOT NULL,
    query        TEXT NOT NULL,
    keywords     TEXT NOT NULL DEFAULT '[]',
    vector       BLOB,
    best_score   REAL,
    opened_at    TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    closed_at    TEXT,
    closed_by    TEXT
);
CREATE INDEX retrieval_gaps_open ON retrieval_gaps (namespace, expires_at) WHERE closed_at IS NULL;
