-- Overlap policies (ADR 0014). One row per job that has an execution in
-- progress fired with a policy other than ALLOW: the first attempt of such
-- an execution takes the row (or is skipped, buffered or cancels the one
-- holding it) in one transaction under the row's lock, and the
-- execution's final outcome deletes it, or hands it to the buffered
-- execution. Jobs whose executions are ALLOW never have a row.
CREATE TABLE active_executions (
    namespace             text        NOT NULL,
    job_id                uuid        NOT NULL,
    execution_id          uuid        NOT NULL,
    started_at            timestamptz NOT NULL,
    -- Past it the row no longer holds the job back (a leaked row: the
    -- outcome was never seen): the sweep releases it and a first attempt
    -- that meets it takes over. From the retry policy, the attempt
    -- timeout and the execution deadline of the request.
    stale_after           timestamptz NOT NULL,
    -- Set while the active execution is a promoted buffered one whose
    -- request is not yet confirmed on the dispatch exchange: the sweep
    -- publishes it again once publish_after has passed (the replica that
    -- promoted it died before its publish was confirmed).
    pending_request       bytea,
    pending_trace         jsonb,
    publish_after         timestamptz,
    -- BUFFER_ONE: the one execution waiting for this one, its first
    -- attempt's DispatchRequest (with its secrets, like a dead letter's),
    -- trace context and how long it may stay active once promoted
    -- (microseconds).
    buffered_execution_id uuid,
    buffered_request      bytea,
    buffered_trace        jsonb,
    buffered_span_us      bigint,
    PRIMARY KEY (namespace, job_id)
);

CREATE INDEX active_executions_stale ON active_executions (stale_after);
CREATE INDEX active_executions_unpublished ON active_executions (publish_after) WHERE pending_request IS NOT NULL;

-- Why an execution was cancelled, when not through CancelExecution (an
-- overlap policy: "cancelled by overlap policy: execution <id>"); empty
-- for CancelExecution.
ALTER TABLE cancellations ADD COLUMN reason text NOT NULL DEFAULT '';
