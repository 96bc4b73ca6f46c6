-- The records: the truth for what is remembered. Kuzu and Qdrant are projections of these rows.
CREATE TABLE turns (
    turn_id      TEXT PRIMARY KEY,
    namespace    TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    turn_number  INTEGER NOT NULL,
    role         TEXT NOT NULL,
    at           TEXT NOT NULL,
    segment      INTEGER NOT NULL,
    offset       INTEGER NOT NULL,
    length       INTEGER NOT NULL,
    checksum     TEXT NOT NULL,
    UNIQUE (namespace, session_id, turn_number)
);
CREATE INDEX turns_position ON turns (segment, offset);

CREATE TABLE memories (
    memory_id        TEXT PRIMARY KEY,
    namespace        TEXT NOT NULL,
    memory_type      TEXT NOT NULL CHECK (memory_type IN ('semantic', 'preference', 'episodic', 'procedural')),
    content          TEXT NOT NULL,
    keywords         TEXT NOT NULL DEFAULT '[]',
    created_at       TEXT NOT NULL,
    event_at         TEXT NOT NULL,
    last_accessed_at TEXT,
    access_count     INTEGER NOT NULL DEFAULT 0,
    generation       INTEGER NOT NULL DEFAULT 0,
    tier             TEXT NOT NULL DEFAULT 'hot' CHECK (tier IN ('hot', 'warm', 'cold')),
    status           TEXT NOT NULL DEFAULT 'active'
                     CHECK (status IN ('active', 'superseded', 'merged', 'erased')),
    superseded_by    TEXT REFERENCES memories (memory_id),
    valence          REAL NOT NULL DEFAULT 0,
    arousal          REAL NOT NULL DEFAULT 0,
    surprise         REAL NOT NULL DEFAULT 0,
    importance       REAL NOT NULL DEFAULT 0.5,
    confidence       REAL NOT NULL DEFAULT 1,
    decay_score      REAL NOT NULL DEFAULT 1,
    fast_path        INTEGER NOT NULL DEFAULT 0,
    source_turn_id   TEXT REFERENCES turns (turn_id),
    session_id       TEXT,
    turn_number      INTEGER,
    revision         INTEGER NOT NULL DEFAULT 1,
    embedding        BLOB,
    embedding_model  TEXT
);
CREATE INDEX memories_namespace_status ON memories (namespace, status);
CREATE INDEX memories_session ON memories (namespace, session_id, turn_number);

CREATE TABLE memory_entities (
    memory_id TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    entity    TEXT NOT NULL,
    PRIMARY KEY (memory_id, entity)
);
CREATE INDEX memory_entities_entity ON memory_entities (entity);

CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, keywords, content = 'memories', content_rowid = 'rowid', tokenize = 'porter unicode61'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, keywords) VALUES (new.rowid, new.content, new.keywords);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, keywords)
    VALUES ('delete', old.rowid, old.content, old.keywords);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF content, keywords ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, keywords)
    VALUES ('delete', old.rowid, old.content, old.keywords);
    INSERT INTO memories_fts (rowid, content, keywords) VALUES (new.rowid, new.content, new.keywords);
END;

CREATE TABLE access_log (
    access_id    INTEGER PRIMARY KEY,
    memory_id    TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    retrieval_id TEXT,
    accessed_at  TEXT NOT NULL,
    rank         INTEGER
);
CREATE INDEX access_log_memory ON access_log (memory_id, accessed_at);

CREATE TABLE save_decisions (
    decision_id  INTEGER PRIMARY KEY,
    turn_id      TEXT NOT NULL REFERENCES turns (turn_id),
    memory_id    TEXT REFERENCES memories (memory_id),
    decided_at   TEXT NOT NULL,
    path         TEXT NOT NULL,
    save         INTEGER NOT NULL,
    memory_type  TEXT NOT NULL,
    confidence   REAL NOT NULL,
    importance   REAL NOT NULL,
    reason       TEXT NOT NULL,
    features     TEXT NOT NULL DEFAULT '{}',
    outcome      TEXT,
    outcome_at   TEXT
);
CREATE INDEX save_decisions_turn ON save_decisions (turn_id);

CREATE TABLE retrieval_events (
    retrieval_id TEXT PRIMARY KEY,
    namespace    TEXT NOT NULL,
    query        TEXT NOT NULL,
    at           TEXT NOT NULL,
    k            INTEGER NOT NULL,
    result_ids   TEXT NOT NULL DEFAULT '[]',
    top_score    REAL,
    outcome      TEXT,
    outcome_at   TEXT
);
CREATE INDEX retrieval_events_at ON retrieval_events (namespace, at);

CREATE TABLE compaction_history (
    compaction_id INTEGER PRIMARY KEY,
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    merged_into   TEXT REFERENCES memories (memory_id),
    source_ids    TEXT NOT NULL DEFAULT '[]',
    replay_before REAL,
    replay_after  REAL,
    accepted      INTEGER NOT NULL DEFAULT 0,
    reason        TEXT NOT NULL DEFAULT ''
);

CREATE TABLE outbox (
    outbox_id  INTEGER PRIMARY KEY AUTOINCREMENT,
    op         TEXT NOT NULL CHECK (op IN ('upsert_memory', 'delete_memory')),
    memory_id  TEXT NOT NULL,
    created_at TEXT NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    done_at    TEXT
);
CREATE INDEX outbox_pending ON outbox (outbox_id) WHERE done_at IS NULL;
