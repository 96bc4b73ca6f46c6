-- forget (issue #20): a forgotten memory leaves every recall path and can be restored. memories.status gains
-- 'forgotten' and memory_revisions.change gains 'forget' and 'restore'. SQLite cannot widen a CHECK in place; for a
-- change no existing row can violate, its documented way (https://sqlite.org/lang_altertable.html#otheralter) is to
-- edit the table's schema text. A connection opened after this reads the new text (SqliteRecords.open migrates on
-- a connection of its own, then opens the writer and readers).
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
    SET sql = replace(sql, '''merged'', ''erased'')', '''merged'', ''erased'', ''forgotten'')')
    WHERE type = 'table' AND name = 'memories';
UPDATE sqlite_schema
    SET sql = replace(sql, '''update'', ''supersede'')', '''update'', ''supersede'', ''forget'', ''restore'')')
    WHERE type = 'table' AND name = 'memory_revisions';
PRAGMA writable_schema = OFF;
