-- Long turns (issue #22): a turn over max_content_bytes is logged whole and remembered in chunks, one memory each
-- (long_turns.py). This row says which part of which turn a chunk memory is: its place among the turn's chunks and
-- its character span in the logged text. It holds no words, and goes with its memory row (an erase deletes it).
CREATE TABLE memory_chunks (
    memory_id  TEXT PRIMARY KEY REFERENCES memories (memory_id) ON DELETE CASCADE,
    turn_id    TEXT NOT NULL,
    chunk      INTEGER NOT NULL CHECK (chunk >= 0),
    chunks     INTEGER NOT NULL CHECK (chunks > chunk),
    start_char INTEGER NOT NULL CHECK (start_char >= 0),
    end_char   INTEGER NOT NULL CHECK (end_char > start_char)
);
CREATE INDEX memory_chunks_by_turn ON memory_chunks (turn_id, chunk);
