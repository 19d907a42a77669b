-- The dispatcher's redelivery dedupe. The dispatch queues are at least
-- once: the trigger's outbox relay republishes a request whose row it had
-- not deleted when it crashed, after the broker had confirmed it. A
-- redelivered attempt that already completed must not reach the target
-- again. One row per execution (not per attempt: the question is always
-- "has this attempt or a later one completed?"), upserted in batches after
-- a message's consequences are confirmed, looked up in batches by primary
-- key before delivering.
CREATE TABLE completed_attempts (
    execution_id uuid        PRIMARY KEY,
    -- The highest attempt completed: delivered, or failed with its retry or
    -- dead letter on the broker. Attempts up to it are not delivered again.
    attempt      integer     NOT NULL,
    -- The execution is over (succeeded, or dead): no attempt of it is
    -- delivered again, until a redrive deletes the row.
    final        boolean     NOT NULL,
    done_time    timestamptz NOT NULL,
    -- Set by a redrive to the dead letter's dead_time (and attempt, final
    -- reset): records of attempts done at or before it are stale (the
    -- pipeline records the dead attempt after publishing its dead letter,
    -- so the record may land after the redrive) and change nothing.
    floor_time   timestamptz
);

-- Pruning (by done_time; a redrive sets it to the dead time): rows older than the retention (a republished request arrives
-- within minutes of the original) are deleted in bounded batches.
CREATE INDEX completed_attempts_done_time ON completed_attempts (done_time);
