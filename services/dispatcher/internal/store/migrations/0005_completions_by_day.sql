-- Completion records by day of the slot (ADR 0028). Every execution writes
-- one, so at the product's scale the table takes 50 million rows a day.
-- Keyed by the random execution id alone, every insert landed on a random
-- page of an index of the whole retention (about 100 million entries at
-- 48 hours), and every row was deleted again, one by one, by the janitor.
-- Keyed by (nominal_time, execution_id) and partitioned by day of
-- nominal_time, the inserts append at the right edge of today's index, the
-- done_time index goes, and the retention drops whole days
-- (libs/daypart). Every request carries its slot's nominal time, so every
-- look-up names its row by the full key and reads one day's partition.
--
-- The days' partitions are created by the dispatcher before it consumes
-- (store.MaintainCompletions), so that no record of a day lands in
-- completed_attempts_default, whose rows in a day's range would forbid
-- creating that day later. Rows outside every day's partition (a
-- backfill's slots older than the oldest day kept) go there, and the
-- janitor trims them by done_time; it stays small.
--
-- The records written before this migration are not kept: their slot's
-- time is not known. A copy of such an attempt that arrives after the
-- upgrade (only a trigger failure republishes, within minutes) reaches its
-- target again, with the same webhook-id, as at-least-once delivery
-- allows.
DROP TABLE completed_attempts;

CREATE TABLE completed_attempts (
    -- The slot of the execution: its nominal time and the execution id
    -- derived from it (libs/execid).
    nominal_time timestamptz NOT NULL,
    execution_id uuid        NOT NULL,
    -- The highest attempt completed: delivered, or failed with its retry or
    -- dead letter on the broker. Attempts up to it are not delivered again.
    attempt      integer     NOT NULL,
    -- The execution is over (succeeded, or dead): no attempt of it is
    -- delivered again, until a redrive resets the row.
    final        boolean     NOT NULL,
    done_time    timestamptz NOT NULL,
    -- Set by a redrive to the dead letter's dead_time (and attempt, final
    -- reset): records of attempts done at or before it are stale (the
    -- pipeline records the dead attempt after publishing its dead letter,
    -- so the record may land after the redrive) and change nothing.
    floor_time   timestamptz,
    PRIMARY KEY (nominal_time, execution_id)
) PARTITION BY RANGE (nominal_time);

CREATE TABLE completed_attempts_default PARTITION OF completed_attempts DEFAULT;
