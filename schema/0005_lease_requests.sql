-- xmod schema version 5: the worker's request id of each lease.

-- LeaseJob is retried by a group whose answer was lost (the coordinator stopped
-- after committing the lease, or the call timed out); the retry carries the same
-- request id and gets the same lease back instead of a second one.
ALTER TABLE attempts ADD COLUMN lease_request TEXT;
