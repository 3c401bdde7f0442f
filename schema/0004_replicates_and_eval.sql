-- What a law needs of each job beyond the first view: the seed (replicates), the
-- tokens really trained (steps x batch_tokens), the configuration without its
-- seed (replicates of one configuration share it), the embedding parameters, and
-- the final evaluation's standard errors and realised routing capacities.
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
    AS final_flops_ratio_causal
FROM sweep_jobs sj
JOIN sweeps s ON s.sweep_id = sj.sweep_id
JOIN jobs j ON j.job_id = sj.job_id;
