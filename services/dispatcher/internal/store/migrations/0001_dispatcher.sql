-- The dispatcher's state: the dead-letter store (filled from the
-- `cronmesh.dead` queue, since a broker queue cannot be browsed or searched)
-- and the cancelled executions. Names are unqualified; the search_path
-- selects the schema (`dispatcher` in production).

-- One row per execution that exhausted its retries or failed permanently.
-- request is the DispatchRequest protobuf of the last attempt WITH the
-- target's signing secret: a redrive must sign with it. Every API read path
-- strips the secret.
CREATE TABLE dead_letters (
    id               uuid        PRIMARY KEY,
    namespace        text        NOT NULL,
    job_id           uuid        NOT NULL,
    execution_id     uuid        NOT NULL,
    -- The last attempt made.
    attempt          integer     NOT NULL,
    nominal_time     timestamptz,
    dead_time        timestamptz NOT NULL,
    reason           text        NOT NULL,
    -- 0 without an HTTP response.
    response_status  integer     NOT NULL,
    response_excerpt text        NOT NULL,
    request          bytea       NOT NULL
);

-- The drainer's idempotence: the dead queue is consumed at least once, and a
-- redelivered dead letter of the same attempt is the same dead letter.
CREATE UNIQUE INDEX dead_letters_attempt ON dead_letters (execution_id, attempt);
-- ListDeadLetters pages newest first by (dead_time, id), per namespace and
-- optionally per job.
CREATE INDEX dead_letters_recent ON dead_letters (namespace, dead_time DESC, id DESC);
CREATE INDEX dead_letters_job ON dead_letters (namespace, job_id, dead_time DESC, id DESC);

-- Executions whose pending retries must not be delivered. Keyed by
-- (execution_id, namespace) rather than execution_id alone, so a caller of
-- another namespace who learns an execution id cannot take its key.
CREATE TABLE cancellations (
    execution_id uuid        NOT NULL,
    namespace    text        NOT NULL,
    cancel_time  timestamptz NOT NULL,
    PRIMARY KEY (execution_id, namespace)
);
