-- pg_trgm backs the text search over errors and response excerpts. It lives
-- in public (on every service's search_path) and is created once per
-- database; the advisory lock serialises the schemas of parallel test runs
-- that would otherwise race on CREATE EXTENSION.
SELECT pg_advisory_xact_lock(7366021851160513233);
CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;

-- executions: one row per (job, nominal time) slot, fired or missed, with
-- the state of its latest attempt. Partitioned by day of nominal_time (an
-- execution's identity is its slot, so every event of it lands in the same
-- partition) so retention drops whole days; partitions are created ahead
-- by the store's maintenance, never here.
CREATE TABLE executions (
    nominal_time     timestamptz NOT NULL,
    execution_id     uuid        NOT NULL,
    namespace        text        NOT NULL,
    job_id           text        NOT NULL,
    job_display_name text        NOT NULL DEFAULT '',
    trigger_kind     smallint    NOT NULL,
    -- status is the API's ExecutionStatus of the winning event; rank and
    -- attempt order events: the row holds the event with the greatest
    -- (attempt, rank), whatever order events arrive in.
    status           smallint    NOT NULL,
    attempt          integer     NOT NULL,
    rank             smallint    NOT NULL,
    fire_time        timestamptz,
    start_time       timestamptz,
    duration_us      bigint,
    response_status  integer     NOT NULL DEFAULT 0,
    response_excerpt text        NOT NULL DEFAULT '',
    reason           text        NOT NULL DEFAULT '',
    trace_id         text        NOT NULL DEFAULT '',
    update_time      timestamptz NOT NULL,
    PRIMARY KEY (nominal_time, execution_id)
) PARTITION BY RANGE (nominal_time);

-- Listing newest first, per job or per namespace; the trailing
-- execution_id makes the keyset cursor an index range.
CREATE INDEX executions_job ON executions (namespace, job_id, nominal_time DESC, execution_id DESC);
CREATE INDEX executions_namespace ON executions (namespace, nominal_time DESC, execution_id DESC);
-- GetExecution is by id alone.
CREATE INDEX executions_id ON executions (execution_id);
-- Text search: a trigram index over exactly the expression the store's
-- query uses (reason, a newline, the excerpt), so ILIKE '%...%' is an index
-- scan within each day.
CREATE INDEX executions_search ON executions USING gin ((reason || E'\n' || response_excerpt) public.gin_trgm_ops);

-- attempts: one row per delivery of an execution, partitioned like
-- executions.
CREATE TABLE attempts (
    nominal_time     timestamptz NOT NULL,
    execution_id     uuid        NOT NULL,
    attempt          integer     NOT NULL,
    status           smallint    NOT NULL,
    rank             smallint    NOT NULL,
    start_time       timestamptz,
    duration_us      bigint,
    response_status  integer     NOT NULL DEFAULT 0,
    response_excerpt text        NOT NULL DEFAULT '',
    reason           text        NOT NULL DEFAULT '',
    retry_delay_us   bigint,
    update_time      timestamptz NOT NULL,
    PRIMARY KEY (nominal_time, execution_id, attempt)
) PARTITION BY RANGE (nominal_time);
