-- A memory's YAKE keywords are derived from its content after the commit, off the write path (they cost 4-6 ms of
-- pure Python per turn, most of it spent while the embedder wanted the same cores). The commit that inserts the
-- memory inserts its row here; the projector extracts the keywords, writes them (the FTS trigger re-indexes the
-- row) and deletes this row in one transaction, so a crash in between only means the work is done on the next open.
CREATE TABLE pending_keywords (
    memory_id TEXT PRIMARY KEY REFERENCES memories (memory_id) ON DELETE CASCADE
) WITHOUT ROWID;
