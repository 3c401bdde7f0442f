-- xmod schema version 6: the expert baselines (moe, deco).
--
-- The family check of `jobs` admits moe and deco. SQLite cannot alter a CHECK, so
-- the table is rebuilt the way SQLite documents it: the runner turns foreign keys
-- off while migrations run and checks them (foreign_key_check) before each commit.
-- `job_results` gains the three sparsity notions, the inference FLOPs per token,
-- the expert count and top-k, and what a baseline was sized against, all read
-- from the job's resolved config (NULL for jobs resolved before this version).
DROP VIEW job_results;

CREATE TABLE jobs_new (
  job_id               TEXT    PRIMARY KEY,
  family               TEXT    NOT NULL
    CHECK (family IN ('dense', 'xmod', 'mod', 'moe', 'deco')),
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
  last_step            INTEGER NOT NULL DEFAULT 0
);
INSERT INTO jobs_new SELECT * FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_by_lease ON jobs (lease_expires_at) WHERE status IN ('leased', 'running');
CREATE INDEX jobs_by_status ON jobs (status, priority DESC, train_flops, job_id);

CREATE VIEW job_results AS
SELECT
  s.name AS sweep,
  j.job_id, j.family, j.scale, j.sparsity, j.capacity, j.stride, j.context,
  j.n_layers, j.d_model, j.n_params_total, j.n_params_active,
  j.flops_per_token, j.budget_kind, j.budget_value, j.tokens, j.steps, j.train_flops,
  j.status, j.attempt AS attempts,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss' ORDER BY m.step DESC LIMIT 1)
    AS final_val_loss,
  (SELECT MIN(m.value) FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss') AS best_val_loss,
  (SELECT m.value FROM metrics m
    WHERE m.job_id = j.job_id AND m.name = 'val_loss_causal' ORDER BY m.step DESC LIMIT 1)
    AS final_val_loss_causal,
  (SELECT MAX(m.step) FROM metrics m WHERE m.job_id = j.job_id) AS last_step,
  json_extract(j.config_json, '$.seed') AS seed,
  j.batch_tokens,
  j.steps * j.batch_tokens AS tokens_trained,
  json_extract(j.config_json, '$.n_params_embedding') AS n_params_embedding,
  json_remove(json_remove(json_remove(json_remove(j.config_json, '$.seed'), '$.id'),
                          '$.scale'), '$.priority') AS config_key,
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
    AS final_flops_ratio_causal,
  json_extract(j.config_json, '$.param_sparsity') AS param_sparsity,
  json_extract(j.config_json, '$.expert_sparsity') AS expert_sparsity,
  json_extract(j.config_json, '$.token_sparsity') AS token_sparsity,
  json_extract(j.config_json, '$.inference_flops_per_token') AS inference_flops_per_token,
  json_extract(j.config_json, '$.experts.count') AS experts,
  json_extract(j.config_json, '$.experts.top_k') AS top_k,
  json_extract(j.config_json, '$.matched_to') AS matched_to
FROM sweep_jobs sj
JOIN sweeps s ON s.sweep_id = sj.sweep_id
JOIN jobs j ON j.job_id = sj.job_id;
