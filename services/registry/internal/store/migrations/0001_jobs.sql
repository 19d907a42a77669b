-- Job definitions. The columns that queries filter or order on are real
-- columns; the rest of the definition is the protobuf Job (minus output-only
-- fields and the signing secret) in `spec`, so adding a field to the API
-- needs no migration.
CREATE TABLE jobs (
    id             uuid        PRIMARY KEY,
    namespace      text        NOT NULL,
    display_name   text        NOT NULL,
    labels         jsonb       NOT NULL DEFAULT '{}',
    paused         boolean     NOT NULL DEFAULT false,
    version        bigint      NOT NULL,
    spec           bytea       NOT NULL,
    -- Kept out of spec so that no code path that renders spec can leak it.
    signing_secret text,
    -- The nominal time of the last manual run: RunJob never hands out the
    -- same nominal time twice for one job.
    last_run_time  timestamptz,
    create_time    timestamptz NOT NULL,
    update_time    timestamptz NOT NULL
);

-- ListJobs pages by (namespace, id); id is a UUIDv7, so this is also
-- creation order.
CREATE INDEX jobs_namespace_id ON jobs (namespace, id);
CREATE INDEX jobs_namespace_paused_id ON jobs (namespace, paused, id);
CREATE INDEX jobs_labels ON jobs USING gin (labels jsonb_path_ops);

-- Idempotency keys of CreateJob. Deleting a job frees its key.
CREATE TABLE job_requests (
    namespace  text        NOT NULL,
    request_id text        NOT NULL,
    job_id     uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    create_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, request_id)
);
CREATE INDEX job_requests_job_id ON job_requests (job_id);

-- Idempotency keys of RunJob.
CREATE TABLE run_requests (
    namespace    text        NOT NULL,
    request_id   text        NOT NULL,
    job_id       uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    nominal_time timestamptz NOT NULL,
    PRIMARY KEY (namespace, request_id)
);
CREATE INDEX run_requests_job_id ON run_requests (job_id);
