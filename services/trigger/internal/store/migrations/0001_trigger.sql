-- The trigger's state: the ring's partition count and fencing epochs, the
-- schedule of every job (a projection of the registry's job events) and the
-- firing ledger. Names are unqualified; the search_path selects the schema
-- (`trigger` in production).

-- The partition count P is fixed for the life of a cluster: job rows carry
-- partition = hash(job_id) mod P, so changing P would orphan them.
CREATE TABLE ring_meta (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    partitions integer NOT NULL CHECK (partitions > 0)
);

-- One fencing row per partition: every firing commit raises epoch to its own
-- (the owner key's etcd revision) only if the stored one is not newer, so a
-- node that lost its lease cannot commit after the new owner did.
CREATE TABLE partitions (
    partition   integer     PRIMARY KEY,
    epoch       bigint      NOT NULL DEFAULT 0,
    owner       text        NOT NULL DEFAULT '',
    update_time timestamptz
);

-- The schedule state of every job the registry told us about. spec is the
-- registryv1.Job protobuf with its signing secret (the dispatcher signs with
-- it) and without fields the trigger never reads. A deleted job stays as a
-- tombstone (deleted, no spec, no next fire time) so that an older event
-- delivered late cannot bring it back.
CREATE TABLE jobs (
    job_id       uuid        PRIMARY KEY,
    namespace    text        NOT NULL,
    partition    integer     NOT NULL,
    version      bigint      NOT NULL,
    deleted      boolean     NOT NULL DEFAULT false,
    paused       boolean     NOT NULL DEFAULT false,
    spec         bytea       NOT NULL,
    -- The nominal time of the next slot; NULL when the job is paused,
    -- deleted or has no slot left.
    next_fire_at timestamptz,
    -- The newest nominal time a firing commit recorded for the schedule
    -- (fired or missed): a schedule change never re-fires a slot up to it.
    last_nominal timestamptz,
    update_time  timestamptz NOT NULL
) WITH (fillfactor = 90);

-- The loader's query: the due jobs of the owned partitions, oldest first.
CREATE INDEX jobs_due ON jobs (partition, next_fire_at) WHERE next_fire_at IS NOT NULL;
-- ListSlots and Job look jobs up by id and check the namespace; the primary
-- key serves them.

-- The firing ledger: one row per (job, nominal time) slot ever fired or
-- recorded missed. The primary key is the last line of defence against
-- double firing (every insert is ON CONFLICT DO NOTHING) and also serves
-- ListSlots (WHERE job_id = $1 ORDER BY nominal_time DESC).
CREATE TABLE ledger (
    job_id       uuid        NOT NULL,
    nominal_time timestamptz NOT NULL,
    -- firing.SlotKind: 1 scheduled, 2 manual, 3 backfill, 4 catch-up, 5 missed.
    kind         smallint    NOT NULL,
    execution_id uuid        NOT NULL,
    record_time  timestamptz NOT NULL,
    -- The partition epoch the slot was committed under; 0 for manual and
    -- backfill slots, which are not fenced (the primary key dedups them).
    epoch        bigint      NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, nominal_time)
);
