-- Row counts kept by triggers, so stats() reads one small table instead of counting the store on every call
-- (a count(*) over 100k rows is a scan, and it queued behind the writers under load). `sessions` counts distinct
-- (namespace, session_id) pairs: a session id reused in two namespaces is two sessions.
CREATE TABLE row_counts (
    name  TEXT PRIMARY KEY,
    n     INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO row_counts (name, n) SELECT 'turns', count(*) FROM turns;
INSERT INTO row_counts (name, n) SELECT 'memories', count(*) FROM memories;
INSERT INTO row_counts (name, n) SELECT 'access_log', count(*) FROM access_log;
INSERT INTO row_counts (name, n) SELECT 'save_decisions', count(*) FROM save_decisions;
INSERT INTO row_counts (name, n) SELECT 'retrieval_events', count(*) FROM retrieval_events;
INSERT INTO row_counts (name, n) SELECT 'compaction_history', count(*) FROM compaction_history;
INSERT INTO row_counts (name, n) SELECT 'retrieval_gaps', count(*) FROM retrieval_gaps;
INSERT INTO row_counts (name, n) SELECT 'images', count(*) FROM memories WHERE media = 'image';
INSERT INTO row_counts (name, n)
    SELECT 'sessions', count(*) FROM (SELECT DISTINCT namespace, session_id FROM turns);
INSERT INTO row_counts (name, n) SELECT 'memories_' || status, count(*) FROM memories GROUP BY status;

CREATE TRIGGER count_turns_insert AFTER INSERT ON turns BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'turns';
    UPDATE row_counts SET n = n + 1 WHERE name = 'sessions' AND NOT EXISTS (
        SELECT 1 FROM turns WHERE namespace = NEW.namespace AND session_id = NEW.session_id
        AND turn_number != NEW.turn_number);
END;
CREATE TRIGGER count_turns_delete AFTER DELETE ON turns BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'turns';
    UPDATE row_counts SET n = n - 1 WHERE name = 'sessions' AND NOT EXISTS (
        SELECT 1 FROM turns WHERE namespace = OLD.namespace AND session_id = OLD.session_id);
END;

CREATE TRIGGER count_memories_insert AFTER INSERT ON memories BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'memories';
    UPDATE row_counts SET n = n + 1 WHERE name = 'images' AND NEW.media = 'image';
    INSERT INTO row_counts (name, n) VALUES ('memories_' || NEW.status, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER count_memories_delete AFTER DELETE ON memories BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'memories';
    UPDATE row_counts SET n = n - 1 WHERE name = 'images' AND OLD.media = 'image';
    UPDATE row_counts SET n = n - 1 WHERE name = 'memories_' || OLD.status;
END;
CREATE TRIGGER count_memories_status AFTER UPDATE OF status ON memories WHEN OLD.status IS NOT NEW.status BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'memories_' || OLD.status;
    INSERT INTO row_counts (name, n) VALUES ('memories_' || NEW.status, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER count_memories_media AFTER UPDATE OF media ON memories WHEN OLD.media IS NOT NEW.media BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'images' AND OLD.media = 'image';
    UPDATE row_counts SET n = n + 1 WHERE name = 'images' AND NEW.media = 'image';
END;

CREATE TRIGGER count_access_log_insert AFTER INSERT ON access_log BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'access_log';
END;
CREATE TRIGGER count_access_log_delete AFTER DELETE ON access_log BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'access_log';
END;
CREATE TRIGGER count_save_decisions_insert AFTER INSERT ON save_decisions BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'save_decisions';
END;
CREATE TRIGGER count_save_decisions_delete AFTER DELETE ON save_decisions BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'save_decisions';
END;
CREATE TRIGGER count_retrieval_events_insert AFTER INSERT ON retrieval_events BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'retrieval_events';
END;
CREATE TRIGGER count_retrieval_events_delete AFTER DELETE ON retrieval_events BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'retrieval_events';
END;
CREATE TRIGGER count_compaction_history_insert AFTER INSERT ON compaction_history BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'compaction_history';
END;
CREATE TRIGGER count_compaction_history_delete AFTER DELETE ON compaction_history BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'compaction_history';
END;
CREATE TRIGGER count_retrieval_gaps_insert AFTER INSERT ON retrieval_gaps BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'retrieval_gaps';
END;
CREATE TRIGGER count_retrieval_gaps_delete AFTER DELETE ON retrieval_gaps BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'retrieval_gaps';
END;

-- Where recovery starts reading the log on open. Every transaction that indexes turns sets it to the position of
-- the earliest record the journal had appended and not yet seen committed (or the end of the log when none was):
-- concurrent writers commit out of log order, so "after the last committed offset" would skip a record logged
-- before it by a writer that had not committed yet. Absent (a store from before this migration): the whole log.
CREATE TABLE recovery_start (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    segment  INTEGER NOT NULL,
    offset   INTEGER NOT NULL
);

-- Log records that repeat a turn key SQLite already maps to another record (left by a crash between a log append
-- and its commit, then a re-sent turn, in a store written before recovery read the whole log). The log is never
-- rewritten, so they stay in it; listed here, doctor knows they are accounted for, and a turn's key still maps to
-- exactly one record: the indexed one.
CREATE TABLE shadowed_records (
    turn_id      TEXT PRIMARY KEY,
    namespace    TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    turn_number  INTEGER NOT NULL,
    segment      INTEGER NOT NULL,
    offset       INTEGER NOT NULL,
    length       INTEGER NOT NULL,
    noted_at     TEXT NOT NULL
);

-- Which projection formats the graph holds. `session_keys` 2: a Session node's id is "<len(namespace)>:<namespace>/
-- <session_id>" (1 was "namespace/session_id", where team + x/chat and team/x + chat were one session).
CREATE TABLE projection_formats (
    name     TEXT PRIMARY KEY,
    version  INTEGER NOT NULL
) WITHOUT ROWID;
