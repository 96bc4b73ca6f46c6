-- Which model made each text vector, searchable (vector_upgrade.py): a store's int8 vectors are made again in
-- float32 while the daemon is idle, a batch at a time, found by this index instead of a scan of every row (whose
-- embedding blob comes before the model's name). The rowid orders a model's memories, oldest first.
CREATE INDEX memories_embedding_model ON memories (embedding_model);
