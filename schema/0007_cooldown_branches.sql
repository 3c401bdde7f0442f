-- xmod schema version 7: cooldown branches (docs/schedules.md).
--
-- A job is a `run` (trained alone), a `trunk` (the constant-LR part shared by the
-- budgets of one configuration; never a law point) or a `branch` (starts from its
-- trunk's checkpoint at `start_step` and decays). A branch's `train_flops` counts
-- only the steps it trains; `standalone_flops` in `job_results` is what its result
-- would cost trained alone (0 for a trunk), so the saving is their difference.
-- `config_key` also leaves out a branch's `parent` (its trunk's id, which holds
-- the seed), so the replicates of a branch share it as those of a run do.
-- `cluster_key` is what the bootstrap resamples: `config_key` for a run, and for
-- a branch its trunk's config with the seed removed, so the budgets of one trunk
-- (and its replicates) move together.
ALTER TABLE jobs ADD COLUMN role TEXT NOT NULL DEFAULT 'run'
  CHECK (role IN ('run', 'trunk', 'branch'));
ALTER TABLE jobs ADD COLUMN parent_id TEXT REFERENCES jobs (job_id);
ALTER TABLE jobs ADD COLUMN start_step INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;

DROP VIEW job_results;

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
  json_remove(j.config_json, '$.seed', '$.id', '$.scale', '$.priority', '$.parent')
    AS config_key,
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
  json_extract(j.config_json, '$.matched_to') AS matched_to,
  j.role, j.parent_id, j.start_step,
  CASE WHEN j.parent_id IS NULL THEN
    json_remove(json_remove(json_remove(json_remove(j.config_json, '$.seed'), '$.id'),
                            '$.scale'), '$.priority')
  ELSE
    (SELECT json_remove(json_remove(json_remove(json_remove(p.config_json, '$.seed'), '$.id'),
                                    '$.scale'), '$.priority')
       FROM jobs p WHERE p.job_id = j.parent_id)
  END AS cluster_key,
  CASE j.role WHEN 'trunk' THEN 0.0
    ELSE j.flops_per_token * j.steps * j.batch_tokens END AS standalone_flops
FROM sweep_jobs sj
JOIN sweeps s ON s.sweep_id = sj.sweep_id
JOIN jobs j ON j.job_id = sj.job_id;
