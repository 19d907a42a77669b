-- Limited runs (registry Job.max_runs, docs/adr/0015-limited-runs.md).
-- max_runs is the limit of the version the row holds (0: none), kept as a
-- column so that the projection sees whether an event gives the job its
-- limit without decoding the spec. runs_fired counts the scheduled and
-- catch-up slots fired since the job got its limit: the firing commit
-- raises it in the same fenced compare-and-set that advances next_fire_at,
-- so a new partition owner reads the exact count. A job whose runs_fired
-- reached max_runs has no next_fire_at: it costs nothing until the limit
-- is raised.
ALTER TABLE jobs
    ADD COLUMN max_runs   bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_fired bigint NOT NULL DEFAULT 0;
