-- The save decision logs what it saw (issue #4): the emotion and where it came from, the thresholds, the open
-- gap the turn was near, the LLM and its failure if any, and the policy version. Features stay the numbers a
-- learned policy trains on; inputs are the context needed to read or replay the decision.
ALTER TABLE save_decisions ADD COLUMN inputs TEXT NOT NULL DEFAULT '{}';
ALTER TABLE save_decisions ADD COLUMN policy TEXT NOT NULL DEFAULT '';
