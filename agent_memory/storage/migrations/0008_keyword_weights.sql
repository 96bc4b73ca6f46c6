-- Keyword reweighting (issue #5): a word of the keywords that graph-connected memories share gains weight; the
-- keyword search layer multiplies a hit's BM25 score by the best weight among the query words it carries.
CREATE TABLE keyword_weights (
    namespace  TEXT NOT NULL,
    word       TEXT NOT NULL,
    weight     REAL NOT NULL,
    memories   INTEGER NOT NULL,
    connected  INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (namespace, word)
);
