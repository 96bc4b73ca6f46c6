-- Every run of a sleep job (decay, tiering, and the ones to come) leaves a report row (issue #5): when it started
-- and finished, how it ended, what it counted, and the error if it failed.
CREATE TABLE job_runs (
    run_id      INTEGER PRIMARY KEY,
    job         TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'ok', 'failed')),
    counts      TEXT NOT NULL DEFAULT '{}',
    error       TEXT
);
CREATE INDEX job_runs_job ON job_runs (job, started_at);
