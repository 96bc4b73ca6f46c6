-- Re-embedding (reembed.py): a store's text vectors made again by another text model, in place. Each memory's new
-- vector waits here, staged in batches that survive an interruption, until every one is made; then one transaction
-- moves them into `memories` and empties this table. `revision` is the memory's when its vector was made: a memory
-- changed since (the old model's daemon ran between two runs) is embedded again before the swap.
CREATE TABLE reembedding (
    memory_id TEXT PRIMARY KEY REFERENCES memories (memory_id) ON DELETE CASCADE,
    revision  INTEGER NOT NULL,
    model     TEXT NOT NULL,
    vector    BLOB NOT NULL
);
