-- Job.pause_after_dead_letters as a column, so that the pause on failure
-- finds which of a batch's jobs have it in a small index instead of reading
-- every job's spec (docs/adr/0013-pause-on-failure.md). Every write of a
-- job sets it. NULL: the row was written before this migration and only
-- its spec tells; the pause on failure reads that spec once and fills the
-- column in. A nullable column without a default rewrites nothing.
ALTER TABLE jobs ADD COLUMN pause_after_dead_letters integer;
-- The jobs the pause on failure must look at: those with the option and
-- those not yet known not to have it.
CREATE INDEX jobs_pausing ON jobs (id) WHERE pause_after_dead_letters IS DISTINCT FROM 0;
