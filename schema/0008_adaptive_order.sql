-- xmod schema version 8: the law-driven lease order (docs/order.md).
--
-- `order_key` is what the lease order compares within a priority, in FLOPs: NULL
-- means the job's own `train_flops` (cheapest-first, as before). For a sweep with
-- `resources.order: adaptive` the coordinator's refitter writes it on the pending
-- jobs the dense law reads: their own FLOP values, handed out in the order the law
-- asks for them, so those jobs keep the places cheapest-first gave them among the
-- other jobs and only swap among themselves.
ALTER TABLE jobs ADD COLUMN order_key REAL;
DROP INDEX jobs_by_status;
CREATE INDEX jobs_by_status
  ON jobs (status, priority DESC, COALESCE(order_key, train_flops), job_id);
