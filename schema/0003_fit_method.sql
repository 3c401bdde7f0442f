-- How a fit was made: "single" (dense law), "two-stage" or "joint" (xmod law), and
-- the scale left out by --holdout-largest (NULL when every scale was fitted), so
-- that a hold-out fit is not mistaken for the sweep's law.
ALTER TABLE fits ADD COLUMN method TEXT NOT NULL DEFAULT '';
ALTER TABLE fits ADD COLUMN holdout_scale TEXT;
