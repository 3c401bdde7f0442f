-- xmod schema version 9: a cheap job_results read, and a data version per sweep.
--
-- Version 7's view parsed each job's resolved config (about 1.5 KB of JSON) a
-- dozen times per row, looked up eight final evaluation values per row in the
-- large metrics table, and found `last_step` by reading every metric row of the
-- job. On a 10,000-job sweep that made a table read take most of a second, and
-- `last_step` grows with the length of the curves (bench/results_bench.cc times
-- both forms side by side). These values now live in small tables written when
-- their inputs change, so the view only looks them up:
--
-- * `job_config_fields` holds what the view reads out of `config_json`. A job's
--   config never changes once inserted, so a trigger on `jobs` fills the row when
--   the job is inserted, from the helper view `job_config_extract` (version 7's
--   expressions); the jobs already present are filled below.
-- * `job_metric_summary` holds each job's highest metric step and its final
--   evaluation values (NULL where the job has none). Metrics are the hot path
--   (every report of every worker), so no trigger fires per metric row; the
--   store keeps the summary in the transaction of each metric batch (the step
--   rises to the batch's highest; an evaluation row copies the finals again from
--   the helper view `job_metric_finals`, version 7's subqueries, one seek each)
--   and of each lease that trims metrics (the whole row again, from
--   `job_metric_rollup`). A program that writes metrics itself must refresh the
--   summary afterwards, with
--     INSERT OR REPLACE INTO job_metric_summary SELECT * FROM job_metric_rollup;
--
-- The view keeps every column of version 7, in the same order, with the same
-- values and SQLite types (store_test compares it with version 7's text on a
-- database holding every kind of job). The new tables' value columns have no
-- declared type, so that a value keeps the type SQLite computed for it.
--
-- `sweep_versions` counts the changes to what a sweep's answers show. The store
-- raises it in the same transaction as each write to the sweep, its jobs'
-- states, attempts, metrics and checkpoints, or its fits; the dashboard builds
-- its ETags from it, so a poll of unchanged data costs one lookup
-- (docs/dashboard.md). Writers other than the store do not raise it.
--
-- A later migration that rebuilds `jobs` drops its trigger with the table and
-- must create it again.

-- What job_results reads out of a job's config, with version 7's expressions.
-- Read by the fill and the trigger below; job_results does not read it.
CREATE VIEW job_config_extract AS
SELECT
  j.job_id,
  json_extract(j.config_json, '$.seed') AS seed,
  json_extract(j.config_json, '$.n_params_embedding') AS n_params_embedding,
  json_remove(j.config_json, '$.seed', '$.id', '$.scale', '$.priority', '$.parent')
    AS config_key,
  json_extract(j.config_json, '$.param_sparsity') AS param_sparsity,
  json_extract(j.config_json, '$.expert_sparsity') AS expert_sparsity,
  json_extract(j.config_json, '$.token_sparsity') AS token_sparsity,
  json_extract(j.config_json, '$.inference_flops_per_token') AS inference_flops_per_token,
  json_extract(j.config_json, '$.experts.count') AS experts,
  json_extract(j.config_json, '$.experts.top_k') AS top_k,
  json_extract(j.config_json, '$.matched_to') AS matched_to,
  CASE WHEN j.parent_id IS NULL THEN
    json_remove(json_remove(json_remove(json_remove(j.config_json, '$.seed'), '$.id'),
                            '$.scale'), '$.priority')
  ELSE
    (SELECT json_remove(json_remove(json_remove(json_remove(p.config_json, '$.seed'), '$.id'),
                                    '$.scale'), '$.priority')
       FROM jobs p WHERE p.job_id = j.parent_id)
  END AS cluster_key,
  -- d_ff / d_e of a moe job (SqliteStore::JobResults adds it to the view's rows).
  CASE WHEN j.family = 'moe' THEN
    json_extract(j.config_json, '$.d_ff') / json_extract(j.config_json, '$.experts.width')
  END AS granularity
FROM jobs j;

-- The final values of a job's evaluations, with version 7's subqueries (one
-- index seek each). The store reads it after a batch with evaluations; the view
-- below builds on it; job_results does not read it.
CREATE VIEW job_metric_finals AS
SELECT
  j.job_id,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss' ORDER BY m.step DESC LIMIT 1)
    AS final_val_loss,
  (SELECT MIN(m.value) FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss') AS best_val_loss,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss_causal' ORDER BY m.step DESC LIMIT 1)
    AS final_val_loss_causal,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss_se' ORDER BY m.step DESC LIMIT 1)
    AS final_val_loss_se,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss_causal_se' ORDER BY m.step DESC LIMIT 1)
    AS final_val_loss_causal_se,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_capacity' ORDER BY m.step DESC LIMIT 1)
    AS final_capacity,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_capacity_causal' ORDER BY m.step DESC LIMIT 1)
    AS final_capacity_causal,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_flops_ratio_causal' ORDER BY m.step DESC LIMIT 1)
    AS final_flops_ratio_causal
FROM jobs j;

CREATE TABLE job_config_fields (
  job_id  TEXT PRIMARY KEY REFERENCES jobs (job_id),
  seed, n_params_embedding, config_key, param_sparsity, expert_sparsity, token_sparsity,
  inference_flops_per_token, experts, top_k, matched_to, cluster_key, granularity
);
INSERT INTO job_config_fields SELECT * FROM job_config_extract;

-- Each job's highest metric step and final evaluation values, as version 7's
-- view computed them (the step by reading all the job's metric rows). Read by
-- the fill below and by the store after a trim; job_results does not read it.
CREATE VIEW job_metric_rollup AS
SELECT j.job_id, (SELECT MAX(m.step) FROM metrics m WHERE m.job_id = j.job_id) AS last_step,
       f.final_val_loss, f.best_val_loss, f.final_val_loss_causal, f.final_val_loss_se,
       f.final_val_loss_causal_se, f.final_capacity, f.final_capacity_causal,
       f.final_flops_ratio_causal
FROM jobs j JOIN job_metric_finals f ON f.job_id = j.job_id;

-- At most one row per job; none (or NULLs) for a job without metrics.
CREATE TABLE job_metric_summary (
  job_id     TEXT PRIMARY KEY REFERENCES jobs (job_id),
  last_step  INTEGER,
  final_val_loss, best_val_loss, final_val_loss_causal, final_val_loss_se,
  final_val_loss_causal_se, final_capacity, final_capacity_causal, final_flops_ratio_causal
) WITHOUT ROWID;
INSERT INTO job_metric_summary
SELECT * FROM job_metric_rollup WHERE job_id IN (SELECT DISTINCT job_id FROM metrics);

CREATE TRIGGER jobs_add_fields AFTER INSERT ON jobs BEGIN
  INSERT INTO job_config_fields SELECT * FROM job_config_extract WHERE job_id = NEW.job_id;
  -- Branches inserted before their trunk (the store inserts trunks first; another
  -- writer need not) get their cluster key now.
  UPDATE job_config_fields SET cluster_key =
    (SELECT e.cluster_key FROM job_config_extract e WHERE e.job_id = job_config_fields.job_id)
  WHERE job_id IN (SELECT b.job_id FROM jobs b WHERE b.parent_id = NEW.job_id);
END;

CREATE TABLE sweep_versions (
  sweep_id      INTEGER PRIMARY KEY REFERENCES sweeps (sweep_id),
  data_version  INTEGER NOT NULL DEFAULT 0
);
INSERT INTO sweep_versions (sweep_id) SELECT sweep_id FROM sweeps;

DROP VIEW job_results;

CREATE VIEW job_results AS
SELECT
  s.name AS sweep,
  j.job_id, j.family, j.scale, j.sparsity, j.capacity, j.stride, j.context,
  j.n_layers, j.d_model, j.n_params_total, j.n_params_active,
  j.flops_per_token, j.budget_kind, j.budget_value, j.tokens, j.steps, j.train_flops,
  j.status, j.attempt AS attempts,
  ms.final_val_loss,
  ms.best_val_loss,
  ms.final_val_loss_causal,
  ms.last_step,
  f.seed,
  j.batch_tokens,
  j.steps * j.batch_tokens AS tokens_trained,
  f.n_params_embedding,
  f.config_key,
  ms.final_val_loss_se,
  ms.final_val_loss_causal_se,
  ms.final_capacity,
  ms.final_capacity_causal,
  ms.final_flops_ratio_causal,
  f.param_sparsity,
  f.expert_sparsity,
  f.token_sparsity,
  f.inference_flops_per_token,
  f.experts,
  f.top_k,
  f.matched_to,
  j.role, j.parent_id, j.start_step,
  f.cluster_key,
  CASE j.role WHEN 'trunk' THEN 0.0
    ELSE j.flops_per_token * j.steps * j.batch_tokens END AS standalone_flops
FROM sweep_jobs sj
JOIN sweeps s ON s.sweep_id = sj.sweep_id
JOIN jobs j ON j.job_id = sj.job_id
LEFT JOIN job_config_fields f ON f.job_id = j.job_id
LEFT JOIN job_metric_summary ms ON ms.job_id = j.job_id;
