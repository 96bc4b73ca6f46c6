-- Consolidation (issue #5): each merge's history row says where it stands. A merge is committed "on trial", checked
-- by generative replay, then accepted or undone; a row left on trial by a crash is undone when compaction next runs.
ALTER TABLE compaction_history ADD COLUMN namespace TEXT NOT NULL DEFAULT '';
ALTER TABLE compaction_history ADD COLUMN status TEXT NOT NULL DEFAULT 'accepted'
    CHECK (status IN ('trial', 'accepted', 'rejected'));
ALTER TABLE compaction_history ADD COLUMN method TEXT NOT NULL DEFAULT '';
ALTER TABLE compaction_history ADD COLUMN queries TEXT NOT NULL DEFAULT '[]';
CREATE INDEX compaction_history_status ON compaction_history (status);
CREATE INDEX memories_superseded_by ON memories (superseded_by);
