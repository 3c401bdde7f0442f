-- xmod schema version 1. See schema/README.md for what every table, column and
-- view means and which invariants the store keeps.

CREATE TABLE sweeps (
  sweep_id    INTEGER PRIMARY KEY,
  name        TEXT    NOT NULL UNIQUE,
  spec_yaml   TEXT    NOT NULL,
  source      TEXT    NOT NULL,
  created_at  REAL    NOT NULL,
  updated_at  REAL    NOT NULL
);

CREATE TABLE jobs (
  job_id               TEXT    PRIMARY KEY,
  family               TEXT    NOT NULL CHECK (family IN ('dense', 'xmod', 'mod')),
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
  updated_at           REAL    NOT NULL
);
CREATE INDEX jobs_by_status ON jobs (status, priority DESC, train_flops);

CREATE TABLE sweep_jobs (
  sweep_id  INTEGER NOT NULL REFERENCES sweeps (sweep_id),
  job_id    TEXT    NOT NULL REFERENCES jobs (job_id),
  PRIMARY KEY (sweep_id, job_id)
) WITHOUT ROWID;
CREATE INDEX sweep_jobs_by_job ON sweep_jobs (job_id);

CREATE TABLE workers (
  worker_id      TEXT    PRIMARY KEY,
  host           TEXT    NOT NULL,
  ranks          INTEGER NOT NULL,
  registered_at  REAL    NOT NULL,
  last_seen      REAL    NOT NULL
);

CREATE TABLE attempts (
  job_id              TEXT    NOT NULL REFERENCES jobs (job_id),
  attempt             INTEGER NOT NULL,
  worker_id           TEXT    REFERENCES workers (worker_id),
  fencing_token       INTEGER NOT NULL,
  status              TEXT    NOT NULL,
  resumed_from_step   INTEGER NOT NULL DEFAULT 0,
  started_at          REAL    NOT NULL,
  ended_at            REAL,
  reason              TEXT,
  PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

CREATE TABLE metrics (
  job_id     TEXT    NOT NULL REFERENCES jobs (job_id),
  name       TEXT    NOT NULL,
  step       INTEGER NOT NULL CHECK (step >= 0),
  value      REAL    NOT NULL,
  tokens     INTEGER NOT NULL,
  flops      REAL    NOT NULL,
  attempt    INTEGER NOT NULL,
  wall_time  REAL    NOT NULL,
  PRIMARY KEY (job_id, name, step)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
  job_id      TEXT    NOT NULL REFERENCES jobs (job_id),
  step        INTEGER NOT NULL,
  attempt     INTEGER NOT NULL,
  path        TEXT    NOT NULL,
  checksum    TEXT    NOT NULL,
  created_at  REAL    NOT NULL,
  PRIMARY KEY (job_id, step)
) WITHOUT ROWID;

CREATE TABLE fits (
  fit_id       INTEGER PRIMARY KEY,
  sweep_id     INTEGER REFERENCES sweeps (sweep_id),
  law          TEXT    NOT NULL,
  points_hash  TEXT    NOT NULL,
  n_points     INTEGER NOT NULL,
  params_json  TEXT    NOT NULL,
  objective    REAL    NOT NULL,
  rmse         REAL    NOT NULL,
  result_json  TEXT    NOT NULL,
  created_at   REAL    NOT NULL
);

-- One row per (sweep, job): axes, sizes, budget, status and the losses reached.
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
  (SELECT MAX(m.step) FROM metrics m WHERE m.job_id = j.job_id) AS last_step
FROM sweep_jobs sj
JOIN sweeps s ON s.sweep_id = sj.sweep_id
JOIN jobs j ON j.job_id = sj.job_id;

-- One row per (job, step) with the metrics most often plotted side by side.
CREATE VIEW job_curves AS
SELECT
  job_id, step,
  MAX(tokens) AS tokens,
  MAX(flops) AS flops,
  MAX(CASE WHEN name = 'train_loss' THEN value END) AS train_loss,
  MAX(CASE WHEN name = 'val_loss' THEN value END) AS val_loss,
  MAX(CASE WHEN name = 'val_loss_causal' THEN value END) AS val_loss_causal,
  MAX(CASE WHEN name = 'lr' THEN value END) AS lr,
  MAX(CASE WHEN name = 'grad_norm' THEN value END) AS grad_norm
FROM metrics
GROUP BY job_id, step;
