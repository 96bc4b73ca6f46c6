-- Every earlier revision of a memory (revisions.py): the content and status it had from `began_at` until the change
-- at `ended_at` that made the next revision, who made that change and why. The memory row is the current revision.
CREATE TABLE memory_revisions (
    memory_id  TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    revision   INTEGER NOT NULL,
    content    TEXT NOT NULL,
    status     TEXT NOT NULL,
    began_at   TEXT NOT NULL,
    ended_at   TEXT NOT NULL,
    change     TEXT NOT NULL CHECK (change IN ('update', 'supersede')),
    agent      TEXT,
    reason     TEXT,
    PRIMARY KEY (memory_id, revision)
) WITHOUT ROWID;

-- When the current revision began (NULL: when the memory was made, created_at).
ALTER TABLE memories ADD COLUMN revised_at TEXT;

-- memory_links gains SUPERSEDES (the new memory to the one it replaced); SQLite cannot widen a CHECK in place.
CREATE TABLE memory_links_v2 (
    source_id  TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    target_id  TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    relation   TEXT NOT NULL CHECK (relation IN ('DREAM_LINK', 'EVOLVED_FROM', 'RELATED_TO', 'SUPERSEDES')),
    weight     REAL NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (source_id, target_id, relation)
);
INSERT INTO memory_links_v2 (source_id, target_id, relation, weight, created_at, reason)
    SELECT source_id, target_id, relation, weight, created_at, reason FROM memory_links;
DROP TABLE memory_links;
ALTER TABLE memory_links_v2 RENAME TO memory_links;
CREATE INDEX memory_links_target ON memory_links (target_id);
