-- Consecutive-failure rules with count_skipped count the executions an
-- overlap policy skipped as failures: such SKIPPED events are recorded
-- beside the terminal failures (only when a rule of the job counts them).
ALTER TABLE execution_events ADD COLUMN skipped boolean NOT NULL DEFAULT false;
CREATE INDEX execution_events_skipped ON execution_events (job_id, nominal_time) WHERE skipped;
