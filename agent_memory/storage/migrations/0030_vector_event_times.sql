-- Each vector point carries its memory's event time (`event_at`, seconds since the epoch, on a float index): the
-- time layer asks the vectors for the memories of a window nearest the query, over the whole window. Before, it
-- read the newest 500 memories of the window from SQLite and ranked only those. A payload row for every memory
-- with a vector sets the time on the points made before this migration; the projector applies these rows like
-- any other (a search first applies every pending row's vector part), so no point is searched without its time.
INSERT INTO outbox (op, memory_id, created_at, scope)
SELECT 'upsert_memory', memory_id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '+00:00', 'payload'
FROM memories
WHERE embedding IS NOT NULL OR image_embedding IS NOT NULL
   OR memory_id IN (SELECT memory_id FROM context_vectors);
-- Qdrant writes a payload change to a point of an indexed segment by moving the point out of it (copy on write),
-- and still counts it as indexed: after the rows above, a 100k-point collection searched by exact scan (a search
-- 0.7 -> 20 ms) while `index_status` said every vector was indexed. So the records count, per collection, the
-- points a payload change moved since its index was last built (the projector adds as it applies the rows above
-- and every later payload row; the `index` sleep job counts them as unindexed and takes off what it built).
CREATE TABLE vector_index_moves (
    collection TEXT PRIMARY KEY,
    moved      INTEGER NOT NULL CHECK (moved >= 0)
);
