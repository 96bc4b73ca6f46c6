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
