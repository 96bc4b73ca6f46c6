-- Every candidate fact the write path's extractor found, and what the policy step did with it (facts.py): STORE (a
-- new value), MERGE (the same value again: one more observation), SUPERSEDE (a new value closing the one true then)
-- or REJECT, with the reason and the rule that found it. Kept for the policy export, as save decisions are.
CREATE TABLE fact_decisions (
    decision_id  INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace    TEXT NOT NULL,
    turn_id      TEXT,
    subject      TEXT NOT NULL,
    attribute    TEXT NOT NULL,
    value        TEXT NOT NULL,
    action       TEXT NOT NULL CHECK (action IN ('STORE', 'MERGE', 'SUPERSEDE', 'REJECT')),
    reason       TEXT NOT NULL,
    rule         TEXT NOT NULL,
    fact_id      TEXT,
    decided_at   TEXT NOT NULL
);
CREATE INDEX fact_decisions_turn ON fact_decisions (turn_id);
