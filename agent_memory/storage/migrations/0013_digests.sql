-- Digests (issue #3): what a speaker says about themselves, gathered by topic across sessions by the sleep job
-- `digest`. Every statement found belongs to one topic; a topic with two or more statements has a digest memory
-- (generation 1, EVOLVED_FROM its statements' memories), rewritten in place when the topic grows. The cursor says
-- how far each namespace's memories have been read, so a run reads only what is new.
CREATE TABLE digest_topics (
    topic_id   INTEGER PRIMARY KEY,
    namespace  TEXT NOT NULL,
    speaker    TEXT NOT NULL,
    total      BLOB NOT NULL,          -- the sum of the statements' unit vectors, float64 little-endian
    size       INTEGER NOT NULL,
    memory_id  TEXT REFERENCES memories (memory_id),
    updated_at TEXT NOT NULL
);
CREATE INDEX digest_topics_speaker ON digest_topics (namespace, speaker);
CREATE UNIQUE INDEX digest_topics_memory ON digest_topics (memory_id);

CREATE TABLE digest_statements (
    memory_id TEXT NOT NULL REFERENCES memories (memory_id),
    position  INTEGER NOT NULL,        -- the statement's place among its memory's statements
    topic_id  INTEGER NOT NULL REFERENCES digest_topics (topic_id),
    sentence  TEXT NOT NULL,
    at        TEXT NOT NULL,
    PRIMARY KEY (memory_id, position)
) WITHOUT ROWID;
CREATE INDEX digest_statements_topic ON digest_statements (topic_id);

CREATE TABLE digest_cursor (
    namespace  TEXT PRIMARY KEY,
    last_rowid INTEGER NOT NULL        -- memories up to this rowid have been read
) WITHOUT ROWID;
