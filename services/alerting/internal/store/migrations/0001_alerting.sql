-- Channels: where notifications go. The definition (minus its secret) is the
-- protobuf Channel in `spec`; the secret (webhook signing secret or SMTP
-- password) is a column of its own so no code path that renders spec can
-- leak it.
CREATE TABLE channels (
    id           uuid        PRIMARY KEY,
    namespace    text        NOT NULL,
    spec         bytea       NOT NULL,
    secret       text,
    create_time  timestamptz NOT NULL,
    update_time  timestamptz NOT NULL
);
CREATE INDEX channels_namespace_id ON channels (namespace, id);

-- Rules. The definition is the protobuf Rule in `spec`; the evaluator loads
-- every rule into memory, so nothing filters on its fields in SQL.
CREATE TABLE rules (
    id           uuid        PRIMARY KEY,
    namespace    text        NOT NULL,
    spec         bytea       NOT NULL,
    create_time  timestamptz NOT NULL,
    update_time  timestamptz NOT NULL
);
CREATE INDEX rules_namespace_id ON rules (namespace, id);

-- Which channels a rule notifies. RESTRICT: a channel a rule names cannot be
-- deleted (DeleteChannel answers FAILED_PRECONDITION).
CREATE TABLE rule_channels (
    rule_id    uuid NOT NULL REFERENCES rules (id) ON DELETE CASCADE,
    channel_id uuid NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    PRIMARY KEY (rule_id, channel_id)
);
CREATE INDEX rule_channels_channel_id ON rule_channels (channel_id);

-- Jobs as the registry's job events describe them, for the watchdog and the
-- no-success rule. version orders the events: an older one never overwrites
-- a newer one (a deleted job keeps its row, with deleted set, for the same
-- reason). Job ids are text: alerting trusts no format it does not need.
CREATE TABLE jobs (
    id            text        PRIMARY KEY,
    namespace     text        NOT NULL,
    display_name  text        NOT NULL DEFAULT '',
    labels        jsonb       NOT NULL DEFAULT '{}',
    version       bigint      NOT NULL,
    deleted       boolean     NOT NULL DEFAULT false,
    paused        boolean     NOT NULL DEFAULT false,
    -- The protobuf registry.v1.Schedule and the job's create time, from
    -- which libs/jobspec computes the slots exactly as the trigger does.
    schedule      bytea,
    create_time   timestamptz NOT NULL,
    -- The latest scheduled slot an execution event was seen for.
    seen_through  timestamptz,
    -- The next scheduled slot the watchdog waits for, and when it looks at
    -- it (next_slot plus the watchdog's grace); NULL when not watched
    -- (deleted, paused, or a schedule with no slot left).
    next_slot     timestamptz,
    check_time    timestamptz,
    -- The last success (nominal time of its slot, and when it was seen),
    -- for the consecutive-failure count and the no-success rule.
    last_success_nominal timestamptz,
    last_success_time    timestamptz
) WITH (fillfactor = 80);
CREATE INDEX jobs_check_time ON jobs (check_time) WHERE check_time IS NOT NULL;

-- The execution events rules count, one row per (execution_id, attempt,
-- kind): the key that makes a redelivered event count once. Pruned after
-- the retention window by the janitor.
CREATE TABLE execution_events (
    execution_id text        NOT NULL,
    attempt      integer     NOT NULL,
    kind         smallint    NOT NULL,
    job_id       text        NOT NULL,
    nominal_time timestamptz NOT NULL,
    -- A terminal failure: FAILED with no retry left, or DEAD.
    failed       boolean     NOT NULL,
    seen_time    timestamptz NOT NULL,
    PRIMARY KEY (execution_id, attempt, kind)
);
CREATE INDEX execution_events_failed ON execution_events (job_id, nominal_time) WHERE failed;
CREATE INDEX execution_events_seen_time ON execution_events (seen_time);

-- Incidents. At most one open (state 1 open, 2 acknowledged) per (rule,
-- job); 3 is resolved.
CREATE TABLE incidents (
    id               uuid        PRIMARY KEY,
    namespace        text        NOT NULL,
    rule_id          uuid        NOT NULL,
    job_id           text        NOT NULL,
    job_display_name text        NOT NULL DEFAULT '',
    kind             smallint    NOT NULL,
    state            smallint    NOT NULL,
    summary          text        NOT NULL,
    slot_time        timestamptz,
    open_time        timestamptz NOT NULL,
    acknowledge_time timestamptz,
    resolve_time     timestamptz,
    resolve_reason   text        NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX incidents_one_open ON incidents (rule_id, job_id) WHERE state <> 3;
CREATE INDEX incidents_open_job ON incidents (job_id) WHERE state <> 3;
CREATE INDEX incidents_namespace_id ON incidents (namespace, id DESC);

-- Notifications to send: an outbox drained by the sender, retried with
-- backoff until a channel accepts them. The payload is fixed at creation,
-- so every retry sends the same bytes under the same webhook-id.
CREATE TABLE notifications (
    id                uuid        PRIMARY KEY,
    incident_id       uuid        NOT NULL,
    channel_id        uuid        NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    event             text        NOT NULL,
    subject           text        NOT NULL,
    payload           bytea       NOT NULL,
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_time timestamptz NOT NULL,
    last_error        text        NOT NULL DEFAULT '',
    create_time       timestamptz NOT NULL,
    sent_time         timestamptz
);
CREATE INDEX notifications_due ON notifications (next_attempt_time) WHERE sent_time IS NULL;
CREATE INDEX notifications_incident_id ON notifications (incident_id);
