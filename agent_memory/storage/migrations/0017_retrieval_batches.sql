-- The number of the last batch of retrieval records written (retrieval_log.py). Each batch's transaction sets it;
-- the read path reads it in the same statement as the rows it ranks, so it knows exactly which batches those rows
-- already count, and lays only the others over them. One row, never deleted.
CREATE TABLE retrieval_batches (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    last  INTEGER NOT NULL
);
INSERT INTO retrieval_batches (id, last) VALUES (1, 0);
