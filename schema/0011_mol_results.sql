-- xmod schema version 11: a Mixture-of-Layers job's routed blocks and top_k.
--
-- The results view's `experts` and `top_k` columns come from a job's "experts"
-- object; a mol job keeps its layout in a "mol" object instead (docs/mol.md), so
-- for family mol they now read its routed blocks N - S and its top_k. The helper
-- view that fills `job_config_fields` is created again with that change (every
-- other expression is version 10's), with the trigger that reads it, and the
-- rows of mol jobs already stored are filled again. No other row changes.
DROP TRIGGER jobs_add_fields;
DROP VIEW job_config_extract;

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
  -- A mol job's routed blocks N - S and their top_k stand where a moe job's
  -- experts and top_k do.
  CASE WHEN j.family = 'mol' THEN
    json_extract(j.config_json, '$.mol.blocks') - json_extract(j.config_json, '$.mol.shared')
  ELSE json_extract(j.config_json, '$.experts.count') END AS experts,
  CASE WHEN j.family = 'mol' THEN json_extract(j.config_json, '$.mol.top_k')
  ELSE json_extract(j.config_json, '$.experts.top_k') END AS top_k,
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

CREATE TRIGGER jobs_add_fields AFTER INSERT ON jobs BEGIN
  INSERT INTO job_config_fields SELECT * FROM job_config_extract WHERE job_id = NEW.job_id;
  -- Branches inserted before their trunk (the store inserts trunks first; another
  -- writer need not) get their cluster key now.
  UPDATE job_config_fields SET cluster_key =
    (SELECT e.cluster_key FROM job_config_extract e WHERE e.job_id = job_config_fields.job_id)
  WHERE job_id IN (SELECT b.job_id FROM jobs b WHERE b.parent_id = NEW.job_id);
END;

UPDATE job_config_fields SET
  experts = (SELECT e.experts FROM job_config_extract e WHERE e.job_id = job_config_fields.job_id),
  top_k = (SELECT e.top_k FROM job_config_extract e WHERE e.job_id = job_config_fields.job_id)
WHERE job_id IN (SELECT job_id FROM jobs WHERE family = 'mol');
