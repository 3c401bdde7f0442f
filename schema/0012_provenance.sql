-- xmod schema version 12: what produced each result (docs/provenance.md).
-- A worker group registers with its build (xmod's version and commit, the build
-- type and compiler, LibTorch, MPI, CUDA, NCCL and its device) as a JSON object;
-- every attempt it is granted keeps a copy of that and of the group's host, so
-- the attempt says what ran it even after the group is gone. NULL for groups
-- (and attempts) from before this version.
ALTER TABLE workers ADD COLUMN build TEXT;
ALTER TABLE attempts ADD COLUMN host TEXT;
ALTER TABLE attempts ADD COLUMN build TEXT;
