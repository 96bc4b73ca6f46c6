-- What changed in the keyword index since the in-memory projection last looked (storage/keyword_index.py): one
-- row per insert, delete, or change of content or keywords of a memory, the same events that maintain
-- memories_fts. The projection reads the rows past the last one it applied, re-reads those memories' words, and
-- deletes the rows it no longer needs. A projection that finds a gap (rows deleted before it read them) rebuilds.
CREATE TABLE keyword_changes (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even once every row is deleted
    row      INTEGER NOT NULL  -- the memory's rowid, which is memories_fts's rowid
);
CREATE TRIGGER keyword_changes_insert AFTER INSERT ON memories BEGIN
    INSERT INTO keyword_changes (row) VALUES (new.rowid);
END;
CREATE TRIGGER keyword_changes_delete AFTER DELETE ON memories BEGIN
    INSERT INTO keyword_changes (row) VALUES (old.rowid);
END;
CREATE TRIGGER keyword_changes_update AFTER UPDATE OF content, keywords ON memories BEGIN
    INSERT INTO keyword_changes (row) VALUES (new.rowid);
END;
