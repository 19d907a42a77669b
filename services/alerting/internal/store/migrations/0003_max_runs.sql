-- Limited runs (registry Job.max_runs, docs/adr/0015-limited-runs.md): a
-- job that has fired its max_runs runs fires no more, and the watchdog
-- must not report its next slot missing. Alerting counts the runs itself,
-- from the execution events, as the trigger counts them: scheduled and
-- catch-up slots (not missed ones) after the job got its limit.
--
-- max_runs is the limit of the version the row holds (0: none);
-- limit_since, when set, is the occur time of the update that gave an
-- unlimited job its limit (slots at or before it do not count; NULL: the
-- job had it from creation); runs_seen is the count.
ALTER TABLE jobs
    ADD COLUMN max_runs    bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_seen   bigint NOT NULL DEFAULT 0,
    ADD COLUMN limit_since timestamptz;

-- One row per run counted, so that the several events of one execution
-- (started, failed, retried, succeeded; a redelivery) count it once.
-- Kept for jobs with a limit and for placeholder rows (version 0: the
-- execution events came before the job's first event), whose runs count
-- when that event gives the job a limit. Pruned 14 days after the slot,
-- past the last retry any retry policy allows; the count stays in
-- runs_seen.
CREATE TABLE limited_runs (
    job_id       text        NOT NULL,
    nominal_time timestamptz NOT NULL,
    PRIMARY KEY (job_id, nominal_time)
);
