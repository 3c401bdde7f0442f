-- xmod schema version 13: a sweep's tags and note (`xmod tag`, docs/results.md).
-- Tags are short labels a researcher filters sweeps by ("baseline", "paper-fig3");
-- the note is free text. Both are the user's, never read by the scheduler.
CREATE TABLE sweep_tags (
  sweep_id  INTEGER NOT NULL REFERENCES sweeps(sweep_id) ON DELETE CASCADE,
  tag       TEXT    NOT NULL CHECK (length(tag) BETWEEN 1 AND 64),
  PRIMARY KEY (sweep_id, tag)
);
ALTER TABLE sweeps ADD COLUMN note TEXT;
