-- The link edges the sleep jobs make (issue #5): DREAM_LINK from dream exploration, and later EVOLVED_FROM from
-- consolidation. SQLite holds them, like everything the graph projects, so a rebuilt graph has them too. The
-- source memory owns its links: re-projecting it replaces them.
CREATE TABLE memory_links (
    source_id  TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    target_id  TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    relation   TEXT NOT NULL CHECK (relation IN ('DREAM_LINK', 'EVOLVED_FROM', 'RELATED_TO')),
    weight     REAL NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (source_id, target_id, relation)
);
CREATE INDEX memory_links_target ON memory_links (target_id);
