-- Erase with proof (issue #20, section 4). An erase is recorded here as an intent before anything is removed, and
-- finished on the next open after a crash. `texts` holds the erased words masked (XORed with a pad kept in front),
-- so the database never holds them in the clear, and is cleared when the erase is done; the rest are ids, offsets
-- and counts, never content. `selector` is what the caller asked for; the closure (memories, turns, log places,
-- digests rewritten, merged memories' sources restored) is resolved once, when the intent is written.
CREATE TABLE erasures (
    erase_id      TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL,
    requested_at  TEXT NOT NULL,
    finished_at   TEXT,
    reason        TEXT NOT NULL,
    selector      TEXT NOT NULL,
    memory_ids    TEXT NOT NULL DEFAULT '[]',
    turn_ids      TEXT NOT NULL DEFAULT '[]',
    places        TEXT NOT NULL DEFAULT '[]',
    digests       TEXT NOT NULL DEFAULT '[]',
    restored      TEXT NOT NULL DEFAULT '[]',
    images        TEXT NOT NULL DEFAULT '[]',
    facts         TEXT NOT NULL DEFAULT '[]',  -- a whole namespace's facts, whatever their sources
    rebuild_graph INTEGER NOT NULL DEFAULT 0,  -- an entity node went: Kuzu keeps deleted strings, so new files
    texts         BLOB,
    state         TEXT NOT NULL CHECK (state IN ('intent', 'purged', 'done')),
    proof         TEXT
);
CREATE INDEX erasures_open ON erasures (state) WHERE state != 'done';

-- A retrieval recorded after an erase may name a memory that is gone (its results were read before): the access
-- rows are written for the memories that still exist, not refused with the whole batch.
DROP TRIGGER retrieval_events_access;
CREATE TRIGGER retrieval_events_access AFTER INSERT ON retrieval_events BEGIN
    INSERT INTO access_log (memory_id, retrieval_id, accessed_at, rank)
    SELECT value, NEW.retrieval_id, NEW.at, key + 1 FROM json_each(NEW.result_ids)
    WHERE value IN (SELECT memory_id FROM memories);
    UPDATE memories SET access_count = access_count + 1, last_accessed_at = NEW.at
    WHERE memory_id IN (SELECT value FROM json_each(NEW.result_ids));
END;
