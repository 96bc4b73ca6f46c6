-- Notes (issue #23): memories a coding agent wrote on purpose, with their label. The note's words are its memory's
-- content; this row holds the kind, tags, source and author, and goes with the memory row (an erase deletes it).
-- The same label is in the note's log record, so recovery writes this row again after a crash.
CREATE TABLE notes (
    memory_id  TEXT PRIMARY KEY REFERENCES memories (memory_id) ON DELETE CASCADE,
    namespace  TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('decision', 'fact', 'finding', 'procedure', 'preference', 'note',
                                             'handoff', 'worklog')),
    tags       TEXT NOT NULL DEFAULT '[]',
    source     TEXT,
    agent      TEXT,
    written_at TEXT NOT NULL
);
CREATE INDEX notes_by_kind ON notes (namespace, kind, written_at);
CREATE INDEX notes_by_time ON notes (namespace, written_at);
