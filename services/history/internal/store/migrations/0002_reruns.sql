-- What a manual run says of its origin, the same on every event of its
-- execution: the execution it re-runs (JobService.RerunExecution), empty
-- otherwise, and what it overrode of the job, as the field names joined by
-- commas ("target,body"; never values, which may be secret), empty for a
-- run of the job as stored. Adding a column with a constant default to the
-- partitioned tables rewrites nothing.
ALTER TABLE executions
    ADD COLUMN rerun_of_execution_id text NOT NULL DEFAULT '',
    ADD COLUMN overridden_fields     text NOT NULL DEFAULT '';
