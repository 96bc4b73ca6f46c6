-- What an outbox row asks the projector to redo: 'all' (the graph and the vectors), 'vectors' (the vectors only,
-- as after the vector shard was swapped for a rebuilt copy) or 'payload' (only fields of the vector payload
-- changed, as when tiering moves a memory: the graph holds no tier). Re-projecting the graph and the vectors for a
-- tier move took 36 s per 100k memories; setting the payload fields takes about a second.
ALTER TABLE outbox ADD COLUMN scope TEXT NOT NULL DEFAULT 'all' CHECK (scope IN ('all', 'vectors', 'payload'));
