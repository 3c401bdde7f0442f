-- xmod schema version 10: the family of a job is no longer checked by SQLite.
--
-- Families are a registry in the code (common/family.h): a build may register
-- families beyond the built-in ones, and a check in the schema would need a
-- migration for each. The store writes only the names of the process's
-- registered families (it validates them when a sweep is submitted and when a
-- row is read back, naming a family this build does not know).
--
-- SQLite cannot alter a CHECK, so `jobs` is rebuilt the way SQLite documents it
-- (the runner turns foreign keys off while migrations run and checks them before
-- each commit): the views that read `jobs` are dropped first and created again
-- with version 9's text, as are its indexes and its trigger. Columns, their
-- order, values and every other check are those of version 9.
DROP VIEW job_results;
DROP VIEW job_metric_rollup;
DROP VIEW job_metric_finals;
DROP VIEW job_config_extract;

CREATE TABLE jobs_new (
  job_id               TEXT    PRIMARY KEY,
  family               TEXT    NOT NULL,
  scale                TEXT    NOT NULL,
  sparsity             REAL    NOT NULL,
  capacity             REAL    NOT NULL,
  stride               INTEGER NOT NULL,
  context              INTEGER NOT NULL,
  n_layers             INTEGER NOT NULL,
  dense_layers         INTEGER NOT NULL,
  d_model              INTEGER NOT NULL,
  n_heads              INTEGER NOT NULL,
  d_ff                 INTEGER NOT NULL,
  vocab_size           INTEGER NOT NULL,
  n_params_total       INTEGER NOT NULL,
  n_params_active      INTEGER NOT NULL,
  flops_per_token      REAL    NOT NULL,
  dense_flops_per_token REAL   NOT NULL,
  budget_kind          TEXT    NOT NULL,
  budget_value         REAL    NOT NULL,
  tokens               INTEGER NOT NULL,
  steps                INTEGER NOT NULL,
  train_flops          REAL    NOT NULL,
  batch_tokens         INTEGER NOT NULL,
  ranks                INTEGER NOT NULL,
  priority             INTEGER NOT NULL DEFAULT 0,
  max_attempts         INTEGER NOT NULL,
  config_json          TEXT    NOT NULL,
  status               TEXT    NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'leased', 'running', 'succeeded', 'failed', 'cancelled')),
  attempt              INTEGER NOT NULL DEFAULT 0,
  status_reason        TEXT,
  created_at           REAL    NOT NULL,
  updated_at           REAL    NOT NULL,
  failures             INTEGER NOT NULL DEFAULT 0,
  fencing_token        INTEGER NOT NULL DEFAULT 0,
  worker_id            TEXT,
  lease_expires_at     REAL,
  last_step            INTEGER NOT NULL DEFAULT 0,
  role                 TEXT    NOT NULL DEFAULT 'run'
    CHECK (role IN ('run', 'trunk', 'branch')),
  parent_id            TEXT    REFERENCES jobs (job_id),
  start_step           INTEGER NOT NULL DEFAULT 0,
  order_key            REAL
);
INSERT INTO jobs_new SELECT * FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_by_lease ON jobs (lease_expires_at) WHERE status IN ('leased', 'running');
CREATE INDEX jobs_by_status
  ON jobs (status, priority DESC, COALESCE(order_key, train_flops), job_id);
CREATE INDEX jobs_by_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;

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

CREATE VIEW job_metric_rollup AS
SELECT j.job_id, (SELECT MAX(m.step) FROM metrics m WHERE m.job_id = j.job_id) AS last_step,
       f.final_val_loss, f.best_val_loss, f.final_val_loss_causal, f.final_val_loss_se,
       f.final_val_loss_causal_se, f.final_capacity, f.final_capacity_causal,
       f.final_flops_ratio_causal
FROM jobs j JOIN job_metric_finals f ON f.job_id = j.job_id;

CREATE TRIGGER jobs_add_fields AFTER INSERT ON jobs BEGIN
  INSERT INTO job_config_fields SELECT * FROM job_config_extract WHERE job_id = NEW.job_id;
  -- Branches inserted before their trunk (the store inserts trunks first; another
  -- writer need not) get their cluster key now.
  UPDATE job_config_fields SET cluster_key =
    (SELECT e.cluster_key FROM job_config_extract e WHERE e.job_id = job_config_fields.job_id)
  WHERE job_id IN (SELECT b.job_id FROM jobs b WHERE b.parent_id = NEW.job_id);
END;

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
