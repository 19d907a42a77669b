-- Pause on failure (Job.pause_after_dead_letters, docs/adr/0013-pause-on-failure.md):
-- the dead-lettered executions of a job since its streak began, one row per
-- execution (an execution id derives from (job id, nominal time), so the
-- nominal time names it): a redelivered DEAD event inserts nothing.
CREATE TABLE dead_lettered_executions (
    job_id       uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    nominal_time timestamptz NOT NULL,
    PRIMARY KEY (job_id, nominal_time)
);

-- Where a job's streak begins: the nominal time of its latest success, or
-- the time it was last resumed, whichever is later. A dead letter at or
-- before it does not count, so a late or redelivered event cannot pause a
-- job again for failures it was resumed after.
CREATE TABLE dead_letter_streaks (
    job_id uuid        PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    since  timestamptz NOT NULL
);
