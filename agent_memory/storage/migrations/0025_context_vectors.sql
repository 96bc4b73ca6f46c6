-- Context vectors (issue #22): each turn memory's second vector, of its words with the turns before and after it
-- in its session, computed off the write path once the next turn exists (context_vectors.py). SQLite keeps the
-- vector, so a rebuild of the vector store needs no model. `basis` names what it was computed from (the memory's
-- revision and the neighbouring turns' ids): when it no longer matches, the vector is computed again.
CREATE TABLE context_vectors (
    memory_id   TEXT PRIMARY KEY REFERENCES memories (memory_id) ON DELETE CASCADE,
    vector      BLOB NOT NULL,
    basis       TEXT NOT NULL,
    computed_at TEXT NOT NULL
);
