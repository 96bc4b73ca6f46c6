-- A read needs the vectors up to date before it searches, not the graph (the walk is answered from SQLite): an
-- outbox row's vector part (payload, vectors, deletions) is applied and stamped here first, by the read itself,
-- and the graph part stays with the background projector, which stamps done_at. 10k store, a retrieval right
-- after a turn was stored: the read had waited ~11 ms for the new memory's projection, 6.6 ms of it in Kuzu.
ALTER TABLE outbox ADD COLUMN vectors_at TEXT;
CREATE INDEX outbox_vectors_pending ON outbox (outbox_id) WHERE vectors_at IS NULL AND done_at IS NULL;
