-- xmod schema version 2: leases with fencing tokens, counted failures, progress.

-- Attempts that count toward max_attempts (expired leases, retryable errors);
-- preemptions do not count.
ALTER TABLE jobs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
-- The token of the current (or last) lease; writes carrying another are refused.
ALTER TABLE jobs ADD COLUMN fencing_token INTEGER NOT NULL DEFAULT 0;
-- The worker group holding the lease, and when the lease runs out (seconds since the epoch).
ALTER TABLE jobs ADD COLUMN worker_id TEXT;
ALTER TABLE jobs ADD COLUMN lease_expires_at REAL;
-- Last step the holder reported in a heartbeat.
ALTER TABLE jobs ADD COLUMN last_step INTEGER NOT NULL DEFAULT 0;

CREATE INDEX jobs_by_lease ON jobs (lease_expires_at) WHERE status IN ('leased', 'running');

-- The lease order (priority, then cheapest, then id) straight from the index,
-- without sorting every pending job on each lease.
DROP INDEX jobs_by_status;
CREATE INDEX jobs_by_status ON jobs (status, priority DESC, train_flops, job_id);

-- Monotonic counters; fencing tokens are unique across all jobs and restarts.
CREATE TABLE counters (
  name   TEXT    PRIMARY KEY,
  value  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('fencing_token', 0);
