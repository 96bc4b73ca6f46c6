-- The rules the stored entities were extracted by (cognition/extraction.py, `SimpleExtractor.rules`). A memory the
-- write path made (generation 0, text) holds the entities its extractor found in its words; when the rules change,
-- the entity refresh (entity_refresh.py) extracts them again while the store is idle, a batch of memories at a time
-- in memory_id order, and `cursor` is the last memory it has done: every memory up to it follows `rules`. NULL
-- once every memory does. Stores made before this migration follow the first rules, which took any capitalised
-- sentence opener for a name ("Consider", "Fix").
CREATE TABLE entity_refresh (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    rules  TEXT NOT NULL,
    cursor TEXT
);
INSERT INTO entity_refresh (id, rules, cursor) VALUES (1, 'proper-nouns-1', NULL);
